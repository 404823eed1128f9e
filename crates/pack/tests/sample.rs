//! `pack` on the sample app, built without -z pack-relative-relocs by gcc
//! with GNU ld and by clang with lld, as a PIE and as a shared library.
//! Oracles outside coldstart: readelf lists the packed file's relocations
//! (RELR offsets = the original's relative offsets, the words now in the
//! file = the original addends, every other relocation unchanged) and the
//! GLIBC_ABI_DT_RELR need; eu-elflint finds nothing new beyond what it says
//! about any linker-packed file; ld.so loads the result (LD_DEBUG
//! statistics), and the program prints the same output.

use coldstart_pack::{Refusal, pack_file};
use coldstart_sample::{BuildOptions, BuiltApp, Compiler, SampleSpec, build, generate};
use coldstart_testkit::skip;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn output(command: &mut Command) -> String {
    let out = command.output().expect("run");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One relocation as readelf prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reloc {
    offset: u64,
    kind: String,
    /// Symbol and addend text for symbolic ones; the addend for relative ones.
    rest: String,
}

/// readelf -W -r, by section: RELA entries, and RELR offsets under the
/// `.relr.dyn` key (kind "RELR").
fn readelf_relocations(path: &Path) -> BTreeMap<String, Vec<Reloc>> {
    let text = output(Command::new("readelf").args(["-W", "-r"]).arg(path));
    let mut sections: BTreeMap<String, Vec<Reloc>> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Relocation section '") {
            current = rest.split('\'').next().unwrap_or_default().to_string();
            sections.entry(current.clone()).or_default();
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = fields.first() else {
            continue;
        };
        let Ok(offset) = u64::from_str_radix(first, 16) else {
            continue;
        };
        if first.len() < 8 {
            continue;
        }
        let entry = if current == ".relr.dyn" {
            if fields.len() != 1 {
                continue;
            }
            Reloc {
                offset,
                kind: "RELR".into(),
                rest: String::new(),
            }
        } else {
            if fields.len() < 3 {
                continue;
            }
            Reloc {
                offset,
                kind: fields[2].to_string(),
                rest: fields[3..].join(" "),
            }
        };
        sections.entry(current.clone()).or_default().push(entry);
    }
    sections
}

/// (p_offset, p_vaddr, p_filesz) of every LOAD segment, from readelf -l.
fn load_segments(path: &Path) -> Vec<(u64, u64, u64)> {
    let text = output(Command::new("readelf").args(["-W", "-l"]).arg(path));
    text.lines()
        .filter(|l| l.trim_start().starts_with("LOAD "))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .take(4)
                .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).expect("hex"))
                .collect();
            (f[0], f[1], f[3])
        })
        .collect()
}

fn word_at(bytes: &[u8], segments: &[(u64, u64, u64)], address: u64) -> u64 {
    let &(offset, vaddr, _) = segments
        .iter()
        .find(|&&(_, v, size)| address >= v && address + 8 <= v + size)
        .unwrap_or_else(|| panic!("0x{address:x} is in no LOAD segment's file bytes"));
    let at = (address - vaddr + offset) as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// What eu-elflint says, with section and header indexes taken out (the
/// packed file adds a section and program headers, which renumbers them).
fn elflint(path: &Path) -> Vec<String> {
    let out = Command::new("eu-elflint")
        .args(["--gnu-ld"])
        .arg(path)
        .output()
        .expect("eu-elflint");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    without_indexes(&text)
        .into_iter()
        .filter(|l| !l.is_empty() && l != "No errors")
        .collect()
}

/// `section [ 7]` and `phdr[11]` without their numbers.
fn without_indexes(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let mut out = String::new();
            let mut rest = line;
            while let Some(open) = rest.find('[') {
                out.push_str(&rest[..=open]);
                let after = &rest[open + 1..];
                match after.find(']') {
                    Some(close) if after[..close].trim().chars().all(|c| c.is_ascii_digit()) => {
                        out.push('N');
                        rest = &after[close..];
                    }
                    _ => rest = after,
                }
            }
            out.push_str(rest);
            out
        })
        .collect()
}

/// The lines eu-elflint prints about RELR itself on a file a linker packed:
/// elfutils 0.188 does not know SHT_RELR, so every RELR file gets them.
fn elflint_on_linker_relr(dir: &Path) -> Vec<String> {
    let source = dir.join("relr.c");
    std::fs::write(
        &source,
        "static int x; int *p = &x; int main(void) { return *p; }\n",
    )
    .unwrap();
    let binary = dir.join("relr");
    output(
        Command::new("gcc")
            .args(["-O1", "-Wl,-z,pack-relative-relocs", "-o"])
            .arg(&binary)
            .arg(&source),
    );
    elflint(&binary)
}

struct Built {
    _dir: tempfile::TempDir,
    app: BuiltApp,
}

fn build_app(compiler: Compiler, ldflags: &[&str]) -> Built {
    let dir = tempfile::tempdir().expect("temp dir");
    let spec = SampleSpec {
        translation_units: 8,
        functions: 160,
        // The test packs the executable and the library into a directory
        // of their own and runs them there.
        parts: 0,
        ..SampleSpec::tiny()
    };
    let src = dir.path().join("src");
    generate(&spec, &src).expect("generate");
    let options = BuildOptions {
        compiler,
        extra_ldflags: ldflags.iter().map(|s| s.to_string()).collect(),
        ..BuildOptions::default()
    };
    let app = build(&src, &dir.path().join("build"), &options, &mut |_| {}).expect("build");
    Built { _dir: dir, app }
}

/// Relocation statistics ld.so prints for one start.
fn loader_statistics(binary: &Path, cwd: &Path) -> (String, u64, u64) {
    let out = Command::new(binary)
        .current_dir(cwd)
        .env("LD_DEBUG", "statistics")
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}: {}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let number = |label: &str| {
        stderr
            .lines()
            .find(|l| {
                l.trim_start_matches(|c: char| c.is_ascii_digit() || c == ':' || c.is_whitespace())
                    .starts_with(label)
            })
            .and_then(|l| l.rsplit(':').next())
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no `{label}` in LD_DEBUG=statistics:\n{stderr}"))
    };
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        number("number of relocations:"),
        number("number of relative relocations:"),
    )
}

/// Packs the app's executable and library into `packed/` and checks both
/// against readelf, eu-elflint and ld.so.
fn check_packed_app(built: &Built) {
    let app = &built.app;
    let packed_dir = app.build_dir.join("packed");
    std::fs::create_dir_all(&packed_dir).unwrap();
    let mut relr_total = 0u64;
    for original in [&app.executable, &app.library] {
        let input_bytes = std::fs::read(original).unwrap();
        let mode = std::fs::metadata(original).unwrap().permissions().mode();
        let out = packed_dir.join(original.file_name().unwrap());
        let report = pack_file(original, Some(&out)).expect("pack");
        assert_eq!(
            std::fs::read(original).unwrap(),
            input_bytes,
            "the input is untouched"
        );
        assert_eq!(
            std::fs::metadata(&out).unwrap().permissions().mode(),
            mode,
            "mode kept"
        );
        assert_eq!(
            std::fs::metadata(&out).unwrap().len(),
            report.file_bytes_after
        );

        let before = readelf_relocations(original);
        let after = readelf_relocations(&out);
        let relative: Vec<&Reloc> = before[".rela.dyn"]
            .iter()
            .filter(|r| r.kind == "R_X86_64_RELATIVE")
            .collect();
        let relr = &after[".relr.dyn"];
        let kept_relative: Vec<&Reloc> = after[".rela.dyn"]
            .iter()
            .filter(|r| r.kind == "R_X86_64_RELATIVE")
            .collect();
        assert!(
            kept_relative.is_empty(),
            "{}: every relative relocation packs",
            original.display()
        );
        let mut expected: Vec<u64> = relative.iter().map(|r| r.offset).collect();
        expected.sort_unstable();
        let listed: Vec<u64> = relr.iter().map(|r| r.offset).collect();
        assert_eq!(
            listed,
            expected,
            "{}: RELR offsets are the original relative offsets",
            original.display()
        );
        assert_eq!(report.relative_packed, listed.len() as u64);
        relr_total += listed.len() as u64;

        // RELR adds the base to the word: the word must be the original addend.
        let packed_bytes = std::fs::read(&out).unwrap();
        let segments = load_segments(&out);
        for r in &relative {
            let addend = u64::from_str_radix(&r.rest, 16).expect("relative addend");
            assert_eq!(
                word_at(&packed_bytes, &segments, r.offset),
                addend,
                "word at 0x{:x}",
                r.offset
            );
        }
        let others = |relocs: &[Reloc]| {
            relocs
                .iter()
                .filter(|r| r.kind != "R_X86_64_RELATIVE")
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            others(&after[".rela.dyn"]),
            others(&before[".rela.dyn"]),
            "symbolic relocations unchanged"
        );
        assert_eq!(
            after.get(".rela.plt"),
            before.get(".rela.plt"),
            "PLT relocations unchanged"
        );

        // glibc's rule: an object that needs libc.so.* and uses DT_RELR must
        // ask libc for GLIBC_ABI_DT_RELR.
        let dynamic = output(Command::new("readelf").args(["-W", "-d"]).arg(&out));
        let needs_libc = dynamic
            .lines()
            .any(|l| l.contains("(NEEDED)") && l.contains("[libc.so."));
        let versions = output(Command::new("readelf").args(["-W", "-V"]).arg(&out));
        let libc_need = versions
            .split("File: ")
            .find(|s| s.starts_with("libc.so."))
            .map(|s| s.contains("Name: GLIBC_ABI_DT_RELR"));
        if needs_libc {
            assert_eq!(libc_need, Some(true), "{}:\n{versions}", out.display());
        } else {
            assert!(
                !versions.contains("GLIBC_ABI_DT_RELR"),
                "{}:\n{versions}",
                out.display()
            );
        }
        assert_eq!(report.version_need_added, needs_libc);

        let allowed = elflint_on_linker_relr(&app.build_dir);
        let old = elflint(original);
        for line in elflint(&out) {
            assert!(
                old.contains(&line) || allowed.contains(&line),
                "{}: eu-elflint says `{line}`, not said of the original",
                out.display()
            );
        }
        let again = pack_file(&out, None).expect_err("a packed file is refused");
        match again {
            coldstart_pack::Error::Refused(r) => assert_eq!(r.reason, Refusal::AlreadyRelr),
            other => panic!("{other}"),
        }
    }
    // The packed program, with the packed library beside it (RUNPATH is
    // $ORIGIN), prints what the original prints; ld.so applied the symbolic
    // relocations as before and the relative ones no longer through RELA.
    let packed_exe = packed_dir.join(app.executable.file_name().unwrap());
    let (plain_out, plain_relocs, plain_relative) =
        loader_statistics(&app.executable, &app.build_dir);
    let (packed_out, packed_relocs, packed_relative) =
        loader_statistics(&packed_exe, &app.build_dir);
    assert!(plain_out.lines().any(|l| l == "READY"));
    assert_eq!(packed_out, plain_out, "same output packed and unpacked");
    assert_eq!(
        packed_relocs, plain_relocs,
        "symbol relocations applied as before"
    );
    assert_eq!(
        plain_relative - packed_relative,
        relr_total,
        "RELA relative relocations gone from the count"
    );
}

fn have_tools() -> bool {
    for (name, package) in [
        ("readelf", "binutils"),
        ("eu-elflint", "elfutils"),
        ("gcc", "gcc"),
    ] {
        if !tool(name) {
            skip(&format!(
                "{name} is not installed (apt-get install {package})"
            ));
            return false;
        }
    }
    true
}

#[test]
fn gcc_and_gnu_ld_build_packs_and_runs() {
    if !have_tools() || !Compiler::Gcc.is_installed() {
        return;
    }
    check_packed_app(&build_app(Compiler::Gcc, &[]));
}

#[test]
fn clang_and_lld_build_packs_and_runs() {
    if !have_tools() {
        return;
    }
    let lld = ["/usr/bin", "/usr/lib/llvm-19/bin"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("ld.lld").exists());
    let (true, Some(lld)) = (Compiler::Clang.is_installed(), lld) else {
        skip("clang or ld.lld is not installed (apt-get install clang lld-19)");
        return;
    };
    let b = format!("-B{}", lld.display());
    check_packed_app(&build_app(Compiler::Clang, &[&b, "-fuse-ld=lld"]));
}
