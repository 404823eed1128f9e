//! `coldstart serve` (the service, and its `install` and `forget`) and
//! `coldstart status`.

use crate::args::{ServeAction, ServeArgs, StatusArgs};
use crate::output;
use anyhow::{Context, bail};
use coldstart_serve::install::{Install, install};
use coldstart_serve::service::{Log, ServeOptions, serve};
use coldstart_serve::state::{State, program_id};
use coldstart_serve::status::{ProgramStatus, Status, status as read_status};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn run(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let max_plan_bytes = args.max_plan_mb.saturating_mul(1 << 20);
    match &args.action {
        None => {
            let options = ServeOptions {
                state_dir: args.state.clone(),
                hold_out_percent: args.hold_out,
                max_plan_bytes,
                max_starts: args.max_starts.max(1),
                learn: !args.no_learn,
                learn_min_read_bytes: (args.learn_min_read_mb.max(0.0) * 1048576.0) as u64,
            };
            // One line per event on stderr: the journal keeps it under the unit.
            let log: Log = Arc::new(|line: &str| eprintln!("coldstart serve: {line}"));
            serve(&options, &log)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(ServeAction::Install {
            plan,
            program,
            quiet_ms,
            cap_ms,
        }) => {
            let state = State::open(&args.state)?;
            let installed = install(
                &state,
                &Install {
                    plan: plan.clone(),
                    exe: program.clone(),
                    max_plan_bytes,
                    quiet_ms: *quiet_ms,
                    cap_ms: *cap_ms,
                },
            )?;
            let served = if state.is_served() {
                "the running service serves it from now on"
            } else {
                "no service runs on this state directory now: start `coldstart serve`"
            };
            println!(
                "installed {} for {} as {}; {served}",
                plan.display(),
                installed.exe.display(),
                installed.id
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(ServeAction::Forget { program }) => forget(&args.state, program),
    }
}

/// Removes a program named by its executable or its id.
fn forget(dir: &Path, program: &str) -> anyhow::Result<ExitCode> {
    let state = State::at(dir);
    let ids = state.program_ids()?;
    let by_exe = std::fs::canonicalize(program)
        .ok()
        .map(|exe| program_id(&exe))
        .filter(|id| ids.contains(id));
    let id = match by_exe {
        Some(id) => id,
        None if ids.iter().any(|i| i == program) => program.to_string(),
        None => bail!(
            "{}: no program {program:?} (neither an executable it serves nor an id; see coldstart status)",
            dir.display()
        ),
    };
    state
        .forget(&id)
        .with_context(|| format!("cannot forget {id}"))?;
    println!("forgot {id}");
    Ok(ExitCode::SUCCESS)
}

pub fn status(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    if !args.state.exists() {
        bail!(
            "{}: no such state directory (the service has not run with it)",
            args.state.display()
        );
    }
    let status = read_status(&args.state)?;
    if args.json {
        output::print_json(&status)?;
    } else {
        output::print_text(&render(&status))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn render(status: &Status) -> String {
    let mut out = format!(
        "coldstart serve: {}, state in {}\n",
        if status.running {
            "running"
        } else {
            "not running"
        },
        status.state_dir
    );
    if status.programs.is_empty() {
        out.push_str(
            "no programs yet: it learns those whose starts wait on the disk, or give it one with \
             `coldstart serve install PLAN --program EXE`\n",
        );
    }
    for p in &status.programs {
        out.push('\n');
        out.push_str(&render_program(p));
    }
    for problem in &status.unreadable {
        out.push_str(&format!("\nunreadable: {problem}\n"));
    }
    out
}

fn render_program(p: &ProgramStatus) -> String {
    let class = match p.class.as_deref() {
        None => String::new(),
        Some("") => " [started without options]".to_string(),
        Some(class) => format!(" [started with {class}]"),
    };
    let mut out = format!("{}{class}  ({})\n  state: {}", p.exe, p.id, p.state);
    if let Some(why) = &p.why {
        out.push_str(&format!(": {why}"));
    }
    out.push('\n');
    if let (Some(bytes), Some(files)) = (p.plan_bytes, p.plan_files) {
        out.push_str(&format!(
            "  plan: {:.1} MiB in {files} files, {}\n",
            bytes as f64 / 1048576.0,
            p.plan_from
        ));
    }
    out.push_str(&format!(
        "  starts: {} seen, {} served, {} held out, {} opted out, {} not served, {} learned from; {} traced\n",
        p.starts_seen,
        p.starts_served,
        p.starts_held_out,
        p.starts_opted_out,
        p.starts_not_served,
        p.starts_learning,
        p.starts_traced
    ));
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} ms"));
    out.push_str(&format!(
        "  cold starts, median end: served {}, held out {}\n",
        ms(p.median_end_ms_served),
        ms(p.median_end_ms_held_out)
    ));
    let g = &p.gain;
    let gain = match (g.ratio, g.ci95) {
        (Some(r), Some((lo, hi))) => format!("{r:.2}x the held-out time [{lo:.2}, {hi:.2}]"),
        (Some(r), None) => format!("{r:.2}x the held-out time (too few starts for an interval)"),
        _ => "not measured yet".to_string(),
    };
    out.push_str(&format!(
        "  gain: {gain} ({} served and {} held-out cold starts)\n",
        g.served, g.held_out
    ));
    if let Some(us) = p.median_first_request_us {
        out.push_str(&format!(
            "  first request after the exec: {us:.0} us (median of cold starts)\n"
        ));
    }
    if p.starts_decided_at_exec > 0 {
        out.push_str(&format!(
            "  decided while the exec was under way: {} of {} starts\n",
            p.starts_decided_at_exec, p.starts_seen
        ));
    }
    out
}
