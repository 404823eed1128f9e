//! Learning plans from ordinary starts.
//!
//! 1. **Which programs.** With learning on, the service is told of every
//!    exec on the machine's filesystems. A start of a program it does not
//!    know is watched (its process tree's reads from storage, from
//!    /proc/PID/io), a few times per program at most, eight at once and
//!    for 10 s at most; a start that read [`DEFAULT_MIN_READ_BYTES`] or
//!    more waited on the disk, and its program is recorded as learning.
//! 2. **The first plan.** The next start of a learning program is traced
//!    (`coldstart_record::attach`: its process tree only, from its exec to
//!    its end) and not served; a plan is compiled from it as `coldstart
//!    plan` compiles one, written atomically, and the program is served.
//! 3. **Refining.** The first [`REFINE_STARTS`] served starts are traced
//!    too, and the plan is compiled again from the newest [`KEPT_RUNS`]
//!    traced starts: pages a served start faulted on (it missed them) come
//!    in, pages none of the starts needed go. In a served start the pages
//!    the plan brought in are mapped by the program's fault-around as it
//!    touches them, so the ones it uses stay needed.
//!
//! A traced start records no names looked up, so a plan learned from
//! scratch warms no lookups; a plan installed by hand keeps its lookups
//! through its refinements.
//!
//! The traces are taken with the device's readahead as it is, so a page
//! counts as needed when the start faulted on it, read it with read(2), or
//! had it mapped by fault-around (`fault_around_bytes`, 64 KiB): a learned
//! plan is a superset of the touched pages at that granularity, where a
//! plan from readahead-off traces (`coldstart plan`, installed by hand) is
//! exact. Held-out and opted-out starts are never traced.

use crate::admit::{admit, check_path};
use crate::install::{DEFAULT_CAP_MS, DEFAULT_QUIET_MS};
use crate::state::{ExeIdentity, Program, ProgramState, STATE_FORMAT, State, program_id_for};
use coldstart_plan::compile::{CompileOptions, compile};
use coldstart_prefetch::Plan;
use coldstart_profile::Profile;
use coldstart_record::attach::{Attached, AttachedEnd};
use coldstart_system::build_id::build_id;
use coldstart_system::identity::FileIdentity;
use std::path::Path;

/// A start that read this much from storage waited on the disk: its
/// program is learned.
pub const DEFAULT_MIN_READ_BYTES: u64 = 8 << 20;

/// Served starts traced after the first plan, to refine it.
pub const REFINE_STARTS: u32 = 3;

/// Traced starts a profile keeps: the newest.
pub const KEPT_RUNS: usize = 5;

/// Starts of one unknown program watched at most, per service run.
pub const WATCHED_STARTS_PER_PROGRAM: u8 = 3;

/// Unknown programs' starts watched at once at most (a thread each,
/// asleep but for a look at /proc every 100 ms).
pub const WATCHED_AT_ONCE: usize = 8;

/// How long an unknown program's start is watched at most: a start that
/// waits on the disk has read enough by then, and a long-running process
/// does not hold a place.
pub const WATCH_CAP_MS: u64 = 10_000;

/// Executables whose start is whatever their arguments make it: programs
/// that run another (env, sudo, nice...) and interpreters run with a script
/// as an argument. A plan keyed by the executable alone would be served to
/// every use of them; until plans have argument classes they are not
/// learned. A script started by its own path (a shebang) is keyed by the
/// script, and learned.
const NOT_LEARNED: &[&str] = &[
    "env", "sudo", "su", "doas", "nice", "ionice", "chrt", "taskset", "timeout", "nohup", "setsid",
    "setpriv", "runuser", "xargs", "time", "strace", "ltrace", "valgrind", "gdb", "perf",
    "flatpak", "snap", "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "python", "perl",
    "ruby", "node", "nodejs", "lua", "php", "tclsh", "wish", "java",
];

/// coldstart's own programs run others too (`trace`, `bench`, `demo`,
/// `coldstart-run`): a learning service took a `coldstart bench` that read
/// 1.5 GB for a start to learn, and set a trace up for its next.
const OWN: &[&str] = &["coldstart", "coldstart-run"];

/// Why the executable at `exe` is not learned, when it is not.
pub fn not_learned(exe: &Path) -> Option<&'static str> {
    let name = exe.file_name()?.to_str()?;
    // python3, python3.11, perl5.36, lua5.4 are their family.
    let family = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    NOT_LEARNED
        .iter()
        .chain(OWN)
        .any(|n| *n == name || *n == family)
        .then_some("it runs what its arguments name (argument classes are not learned)")
}

/// Whether the next start of `program` is to be traced.
pub fn wants_trace(program: &Program) -> bool {
    match program.state {
        ProgramState::Learning => true,
        ProgramState::Serving => program.traced_starts <= REFINE_STARTS,
        _ => false,
    }
}

/// The record of a program to learn, for the executable at `exe` (absolute,
/// links resolved).
/// The argument class of a start run as `argv`: the names of the options
/// its arguments give (an argument that starts with '-', up to an '=',
/// before a lone "--"), each once, sorted, joined by spaces. Values,
/// files and URLs do not count: `soffice --writer a.odt` and `soffice
/// --writer b.odt` are one class, `soffice --calc` another; a browser's
/// child processes (`--type=renderer ...`) are not its own start's.
pub fn argument_class(argv: &[String]) -> String {
    let mut names: Vec<&str> = argv
        .iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .filter(|a| a.len() > 1 && a.starts_with('-'))
        .map(|a| a.split('=').next().unwrap_or(a))
        .collect();
    names.sort_unstable();
    names.dedup();
    names.join(" ")
}

/// A program to learn for the starts of `exe` whose arguments have class
/// `class`.
pub fn learning_program(exe: &Path, class: &str) -> std::io::Result<Program> {
    let identity = FileIdentity::of_path(exe)?;
    let identity = FileIdentity {
        build_id: build_id(exe),
        ..identity
    };
    Ok(Program {
        format: STATE_FORMAT,
        id: program_id_for(exe, Some(class)),
        exe: exe.to_path_buf(),
        identity: ExeIdentity::of(identity),
        state: ProgramState::Learning,
        why: None,
        plan_from: "learned from its starts".to_string(),
        installed_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        quiet_ms: DEFAULT_QUIET_MS,
        cap_ms: DEFAULT_CAP_MS,
        traced_starts: 0,
        class: Some(class.to_string()),
    })
}

/// Writes the traced start into the program's profile, compiles the plan
/// again from the newest traced starts and writes it: the program is then
/// served. Returns the line to log, or why nothing was learned.
pub fn learn_from(
    state: &State,
    id: &str,
    attached: Attached,
    end: &AttachedEnd,
    max_plan_bytes: u64,
) -> Result<String, String> {
    let path = state.profile_path(id);
    let mut profile = Profile::create_or_open(&path).map_err(|e| e.to_string())?;
    let summary = attached
        .finish(&mut profile, end)
        .map_err(|e| format!("the trace of the start failed: {e}"))?;
    let runs = profile.runs().map_err(|e| e.to_string())?;
    let complete: Vec<_> = runs.iter().filter(|r| r.complete).map(|r| r.id).collect();
    for &old in complete.iter().rev().skip(KEPT_RUNS) {
        profile.delete_run(old).map_err(|e| e.to_string())?;
    }
    for run in runs.iter().filter(|r| !r.complete) {
        profile.delete_run(run.id).map_err(|e| e.to_string())?;
    }
    let mut options = CompileOptions::for_page_size(coldstart_system::cache::page_size());
    options.max_bytes = Some(max_plan_bytes);
    let compiled = compile(&profile, &path.display().to_string(), &options)
        .map_err(|e| format!("no plan could be compiled: {e}"))?;
    let mut plan = compiled.plan;
    // A traced start records no names looked up: the lookups of the plan
    // served so far (one installed by hand has them) are kept.
    if plan.lookups.is_empty()
        && let Ok(served) = state.plan(id)
    {
        plan.lookups = served.lookups;
    }
    let left_out = keep_plannable(&mut plan);
    admit(&mut plan, max_plan_bytes).map_err(|why| format!("the learned plan: {why}"))?;
    if plan.extents.is_empty() {
        return Err("the traced start needed no page a plan can hold".into());
    }
    let mut program = state.program(id).map_err(|e| e.to_string())?;
    program.traced_starts = program.traced_starts.saturating_add(1);
    let first = program.state == ProgramState::Learning;
    if matches!(
        program.state,
        ProgramState::Learning | ProgramState::Serving
    ) {
        program.state = ProgramState::Serving;
        program.why = None;
    }
    program.plan_from = format!("learned from {} traced start(s)", plan.source.runs.len());
    state.save_plan(id, &plan).map_err(|e| e.to_string())?;
    state.save_program(&program).map_err(|e| e.to_string())?;
    Ok(format!(
        "{}: {} a plan of {:.1} MiB in {} files from {} traced start(s) ({} events, {} files traced{})",
        program.exe.display(),
        if first { "learned" } else { "refined" },
        plan.bytes() as f64 / 1048576.0,
        plan.files.len(),
        plan.source.runs.len(),
        summary.events,
        summary.files,
        if left_out > 0 {
            format!(", {left_out} files not from disk left out")
        } else {
            String::new()
        }
    ))
}

/// Takes out of `plan` the files a service does not read for a start: the
/// paths `admit` refuses in a plan given to it (relative, through `.` or
/// `..`, under /proc, /sys or /dev), and files the start deleted while it
/// ran (their names, as the kernel gave them, end in " (deleted)").
/// Returns how many were taken out.
fn keep_plannable(plan: &mut Plan) -> usize {
    let keep: Vec<bool> = plan
        .files
        .iter()
        .map(|f| !f.path.ends_with(" (deleted)") && check_path(&f.path).is_ok())
        .collect();
    let mut new_index = vec![usize::MAX; keep.len()];
    let mut next = 0;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            new_index[i] = next;
            next += 1;
        }
    }
    let left_out = keep.len() - next;
    if left_out == 0 {
        return 0;
    }
    let mut index = 0;
    plan.files.retain(|_| {
        index += 1;
        keep[index - 1]
    });
    plan.extents.retain_mut(|e| match new_index.get(e.file) {
        Some(&i) if i != usize::MAX => {
            e.file = i;
            true
        }
        _ => false,
    });
    left_out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::testing;

    #[test]
    fn programs_that_run_their_arguments_are_not_learned() {
        for exe in [
            "/usr/bin/env",
            "/usr/bin/python3.11",
            "/bin/sh",
            "/usr/bin/perl5.36",
            "/usr/bin/sudo",
            "/usr/bin/coldstart",
            "/usr/bin/coldstart-run",
        ] {
            assert!(not_learned(Path::new(exe)).is_some(), "{exe}");
        }
        for exe in [
            "/usr/lib/firefox-esr/firefox-esr",
            "/usr/lib/libreoffice/program/soffice",
            "/usr/bin/envsubst",
            "/opt/shell-tool",
        ] {
            assert!(not_learned(Path::new(exe)).is_none(), "{exe}");
        }
    }

    #[test]
    fn a_class_is_the_option_names_of_the_arguments_sorted_once_each() {
        let class =
            |argv: &[&str]| argument_class(&argv.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(class(&["soffice"]), "");
        assert_eq!(class(&["soffice", "--writer", "a.odt"]), "--writer");
        assert_eq!(class(&["soffice", "--writer", "b.odt"]), "--writer");
        assert_eq!(class(&["soffice", "--calc"]), "--calc");
        // Values after '=' and separate values do not count; each name once.
        assert_eq!(
            class(&[
                "chromium",
                "--type=renderer",
                "--lang=de",
                "--type=gpu",
                "-v",
                "x"
            ]),
            "--lang --type -v"
        );
        // Nothing after a lone "--"; a lone "-" (stdin) is not an option;
        // argv[0] never counts.
        assert_eq!(class(&["-sh", "-", "--", "--not-an-option"]), "");
    }

    #[test]
    fn files_not_from_disk_are_taken_out_and_extents_renumbered() {
        let mut plan = testing::plan(
            &[
                ("/usr/lib/a.so", 65536),
                ("/proc/self/maps", 65536),
                ("/usr/lib/b.so", 65536),
                ("/home/u/.cache/x.db (deleted)", 65536),
            ],
            &[(2, 1, 2), (1, 0, 1), (3, 0, 1), (0, 3, 1)],
        );
        assert_eq!(keep_plannable(&mut plan), 2);
        let paths: Vec<&str> = plan.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["/usr/lib/a.so", "/usr/lib/b.so"]);
        let extents: Vec<(usize, u64)> = plan.extents.iter().map(|e| (e.file, e.page)).collect();
        assert_eq!(extents, [(1, 1), (0, 3)]);
    }
}
