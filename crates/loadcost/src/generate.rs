//! Writes and builds the experiment's programs: for each configuration a
//! C library (or several, for the `libraries` factor) that differs from the
//! base library in one factor only, a host that `dlopen`s it by name and a
//! program that has it as DT_NEEDED, plus one launcher that stamps the time
//! of `execve` for the latter. The C compiler is the system's `cc`.

use crate::design::{Config, Design, Factor};
use anyhow::{Context, bail};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The library's name as programs ask for it (`-lcslc`, `dlopen("libcslc.so")`).
pub const LIBRARY: &str = "libcslc.so";

/// The exported function both programs call: it returns how many of the
/// library's initializers ran, which the runner checks on every run.
pub const READY: &str = "cs_lc_ready";

/// The environment variable the launcher passes the time of `execve` in.
pub const T0_VAR: &str = "CS_LC_T0";

/// One configuration, built.
#[derive(Debug, Clone)]
pub struct BuiltConfig {
    pub config: Config,
    pub dir: PathBuf,
    /// Every library file the programs load for this configuration: what a
    /// cold run evicts.
    pub libraries: Vec<PathBuf>,
    /// Times `dlopen("libcslc.so")` and prints `<ns> <ready>`.
    pub dlopen_host: PathBuf,
    /// Linked against the library; printed `<ns since execve> <ready>`
    /// when run through the launcher.
    pub needed_program: PathBuf,
    /// What `cs_lc_ready` must return: the initializers that ran.
    pub expected_ready: u64,
}

/// All configurations of a design, built under one directory.
#[derive(Debug, Clone)]
pub struct Built {
    pub root: PathBuf,
    /// `launch PROGRAM`: sets CS_LC_T0 to CLOCK_MONOTONIC and execs PROGRAM.
    pub launcher: PathBuf,
    pub configs: Vec<BuiltConfig>,
    /// `cc --version`'s first line.
    pub compiler: String,
}

/// Builds every configuration of `design` under `root` (created if
/// missing), `jobs` compilations at a time. `progress` is called with
/// (done, total) after each configuration.
pub fn build(
    design: &Design,
    root: &Path,
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> anyhow::Result<Built> {
    let compiler = compiler_version()?;
    fs::create_dir_all(root).with_context(|| format!("cannot create {}", root.display()))?;
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", root.display()))?;
    let launcher = root.join("launch");
    write(&root.join("launch.c"), LAUNCHER_SOURCE)?;
    cc(&root, &["-O1", "-o", "launch", "launch.c"])?;

    let configs = design.configs();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, anyhow::Result<BuiltConfig>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(config) = configs.get(index) else {
                        break;
                    };
                    let built = build_config(design, &root, config);
                    let failed = built.is_err();
                    results
                        .lock()
                        .expect("no builder panics")
                        .push((index, built));
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, configs.len());
                    if failed {
                        // Let the other builders finish their current one; the
                        // first error is what the user sees.
                        next.store(configs.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let mut results = results.into_inner().expect("no builder panics");
    results.sort_by_key(|(index, _)| *index);
    let configs = results
        .into_iter()
        .map(|(_, built)| built)
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Built {
        root,
        launcher,
        configs,
        compiler,
    })
}

/// One configuration in its own directory: the search path, the library
/// (or the chain of libraries) under test, and the two programs that load it.
fn build_config(design: &Design, root: &Path, config: &Config) -> anyhow::Result<BuiltConfig> {
    let dir = root.join(config.slug());
    let lib_dir = dir.join("lib");
    fs::create_dir_all(&lib_dir).with_context(|| format!("cannot create {}", lib_dir.display()))?;
    let runpath = search_path(&dir, &lib_dir, config)?;
    let mut libraries = if config.factor == Factor::Libraries {
        build_library_chain(design, &dir, config)?
    } else {
        build_library(&dir, config)?;
        Vec::new()
    };
    libraries.insert(0, lib_dir.join(LIBRARY));
    build_programs(&dir, &runpath)?;
    Ok(BuiltConfig {
        config: *config,
        dlopen_host: dir.join("dlopen-host"),
        needed_program: dir.join("needed-program"),
        expected_ready: if config.factor == Factor::Initializers {
            config.level
        } else {
            0
        },
        libraries,
        dir,
    })
}

/// The programs' run path: for the search factor, `level` empty
/// directories first, then the library's.
fn search_path(dir: &Path, lib_dir: &Path, config: &Config) -> anyhow::Result<String> {
    let mut search = Vec::new();
    if config.factor == Factor::Search {
        for entry in 0..config.level {
            let empty = dir.join(format!("empty{entry:02}"));
            fs::create_dir_all(&empty)
                .with_context(|| format!("cannot create {}", empty.display()))?;
            search.push(empty);
        }
    }
    search.push(lib_dir.to_path_buf());
    Ok(search
        .iter()
        .map(|p| p.to_str().context("non-UTF-8 work directory"))
        .collect::<anyhow::Result<Vec<_>>>()?
        .join(":"))
}

/// The libraries factor: the part libraries, then the top library that
/// needs them all; returns the parts' paths.
fn build_library_chain(
    design: &Design,
    dir: &Path,
    config: &Config,
) -> anyhow::Result<Vec<PathBuf>> {
    let parts = config.library_count();
    let mut libraries = Vec::new();
    let mut top_args = vec![
        "-O1".to_string(),
        "-fPIC".into(),
        "-shared".into(),
        "-w".into(),
        "-o".into(),
        format!("lib/{LIBRARY}"),
        "top.c".into(),
        "-Llib".into(),
        "-Wl,-z,lazy,--no-as-needed,--enable-new-dtags,-rpath,$ORIGIN".into(),
    ];
    for part in 0..parts {
        let name = format!("cslc_part{part:02}");
        let source = format!("{name}.c");
        write(
            &dir.join(&source),
            &part_source(part, parts, design.split.relative, design.split.functions),
        )?;
        let output = format!("lib/lib{name}.so");
        cc(
            dir,
            &[
                "-O1",
                "-fPIC",
                "-shared",
                "-w",
                "-Wl,-z,lazy",
                "-o",
                &output,
                &source,
            ],
        )?;
        libraries.push(dir.join(&output));
        top_args.push(format!("-l{name}"));
    }
    write(&dir.join("top.c"), &base_source(config, &[]))?;
    let args: Vec<&str> = top_args.iter().map(String::as_str).collect();
    cc(dir, &args)?;
    Ok(libraries)
}

/// Every other factor: one library, linked with lazy or immediate binding,
/// its relative relocations packed for the RELR factor.
fn build_library(dir: &Path, config: &Config) -> anyhow::Result<()> {
    write(&dir.join("lib.c"), &library_source(config))?;
    let output = format!("lib/{LIBRARY}");
    let mut args = vec!["-O1", "-fPIC", "-shared", "-w", "-o", &output, "lib.c"];
    args.push(match config.factor {
        Factor::PltNow => "-Wl,-z,now",
        _ => "-Wl,-z,lazy",
    });
    if config.factor == Factor::Relr {
        args.push("-Wl,-z,pack-relative-relocs");
    }
    cc(dir, &args)
}

/// The program that dlopens the library and the one that needs it, both
/// finding it through `runpath`.
fn build_programs(dir: &Path, runpath: &str) -> anyhow::Result<()> {
    let rpath = format!("-Wl,--enable-new-dtags,-rpath,{runpath}");
    write(&dir.join("host.c"), &host_source())?;
    cc(dir, &["-O1", "-w", "-o", "dlopen-host", "host.c", &rpath])?;
    write(&dir.join("program.c"), &program_source())?;
    cc(
        dir,
        &[
            "-O1",
            "-w",
            "-o",
            "needed-program",
            "program.c",
            "-Llib",
            "-lcslc",
            "-Wl,--no-as-needed",
            &rpath,
        ],
    )
}

/// The part every library shares: the counter its initializers bump and the
/// function that reports it. `extra` is appended.
fn base_source(config: &Config, extra: &[String]) -> String {
    let mut source = format!(
        "/* coldstart loadcost: {} = {} ({}) */\n\
         static int cs_lc_counter;\n\
         int {READY}(void) {{ return cs_lc_counter; }}\n",
        config.factor.name(),
        config.level,
        config.factor.description(),
    );
    for text in extra {
        source.push_str(text);
    }
    source
}

fn library_source(config: &Config) -> String {
    let n = config.level;
    let mut body = String::new();
    match config.factor {
        Factor::Relative | Factor::Relr => {
            // Pointers to the library's own data in a const table: the
            // compiler puts it in .data.rel.ro with one relative relocation
            // per entry; `used` keeps it although nothing reads it.
            body.push_str("static int cs_lc_target[64];\n#define T cs_lc_target\n");
            table(&mut body, "void *const", "cs_lc_relative", n, |s, i| {
                let _ = write!(s, "T+{}", i % 64);
            });
        }
        Factor::Symbolic => {
            body.push_str("int cs_lc_symbol;\n");
            table(&mut body, "int *const", "cs_lc_symbolic", n, |s, _| {
                s.push_str("&cs_lc_symbol");
            });
        }
        Factor::Distinct => {
            declare_ints(&mut body, "cs_lc_v", n);
            table(&mut body, "int *const", "cs_lc_distinct", n, |s, i| {
                let _ = write!(s, "&cs_lc_v{i}");
            });
        }
        Factor::Exported => declare_ints(&mut body, "cs_lc_e", n),
        Factor::PltLazy | Factor::PltNow => {
            // Default-visibility functions in a PIC library are called
            // through the PLT, one JUMP_SLOT relocation each.
            body.push_str("volatile int cs_lc_sink;\n");
            for i in 0..n {
                let _ = writeln!(body, "void cs_lc_p{i}(void) {{ cs_lc_sink = {i}; }}");
            }
            body.push_str("void cs_lc_call_all(void) {\n");
            for i in 0..n {
                let _ = writeln!(body, "  cs_lc_p{i}();");
            }
            body.push_str("}\n");
        }
        Factor::Initializers => {
            for i in 0..n {
                let _ = writeln!(
                    body,
                    "__attribute__((constructor)) static void cs_lc_i{i}(void) {{ cs_lc_counter++; }}"
                );
            }
        }
        Factor::Size => {
            if n > 0 {
                // One non-zero byte keeps the array out of .bss: the file
                // carries all of it.
                let _ = writeln!(
                    body,
                    "__attribute__((used)) static const char cs_lc_pad[{}] = {{1}};",
                    n << 20
                );
            }
        }
        Factor::Search | Factor::Libraries => {}
    }
    base_source(config, &[body])
}

/// One of the `libraries` factor's parts: its share of the split body.
fn part_source(part: u64, parts: u64, relative: u64, functions: u64) -> String {
    let share = |total: u64| total / parts + u64::from(part < total % parts);
    let mut body = format!("/* coldstart loadcost: part {part} of {parts} */\n");
    let _ = writeln!(body, "static int cs_lc_target[64];\n#define T cs_lc_target");
    let name = format!("cs_lc_part{part}_relative");
    table(&mut body, "void *const", &name, share(relative), |s, i| {
        let _ = write!(s, "T+{}", i % 64);
    });
    let _ = writeln!(body, "volatile int cs_lc_part{part}_sink;");
    for i in 0..share(functions) {
        let _ = writeln!(
            body,
            "void cs_lc_part{part}_f{i}(void) {{ cs_lc_part{part}_sink = {i}; }}"
        );
    }
    body
}

/// `static TYPE NAME[n] = {...}`, kept by `used`; nothing for n = 0, so
/// the base library has no table at all.
fn table(out: &mut String, ty: &str, name: &str, n: u64, entry: impl Fn(&mut String, u64)) {
    if n == 0 {
        return;
    }
    let _ = writeln!(out, "__attribute__((used)) static {ty} {name}[{n}] = {{");
    for i in 0..n {
        if i > 0 {
            out.push(',');
            if i % 16 == 0 {
                out.push('\n');
            }
        }
        entry(out, i);
    }
    out.push_str("\n};\n");
}

/// `int PREFIX0; int PREFIX1; ...`: exported, in .bss.
fn declare_ints(out: &mut String, prefix: &str, n: u64) {
    for i in 0..n {
        let _ = writeln!(out, "int {prefix}{i};");
    }
}

const CLOCK: &str = "#include <stdio.h>\n#include <stdlib.h>\n#include <time.h>\n\
static long long now(void) {\n\
  struct timespec t;\n\
  clock_gettime(CLOCK_MONOTONIC, &t);\n\
  return t.tv_sec * 1000000000LL + t.tv_nsec;\n\
}\n";

const LAUNCHER_SOURCE: &str = concat!(
    "/* coldstart loadcost launcher: stamp the time, then exec the program. */\n",
    "#include <stdio.h>\n#include <stdlib.h>\n#include <time.h>\n#include <unistd.h>\n",
    "int main(int argc, char **argv) {\n",
    "  if (argc < 2) { fputs(\"usage: launch PROGRAM [ARG...]\\n\", stderr); return 2; }\n",
    "  char stamp[32];\n",
    "  struct timespec t;\n",
    "  clock_gettime(CLOCK_MONOTONIC, &t);\n",
    "  snprintf(stamp, sizeof stamp, \"%lld\", t.tv_sec * 1000000000LL + t.tv_nsec);\n",
    "  setenv(\"CS_LC_T0\", stamp, 1);\n",
    "  execv(argv[1], argv + 1);\n",
    "  perror(argv[1]);\n",
    "  return 127;\n",
    "}\n"
);

/// The dlopen host: the time `dlopen` of the library by name takes.
fn host_source() -> String {
    format!(
        "/* coldstart loadcost: time dlopen of the library by name. */\n\
         #include <dlfcn.h>\n\
         {CLOCK}\
         int main(void) {{\n\
         \x20 long long start = now();\n\
         \x20 void *library = dlopen(\"{LIBRARY}\", RTLD_LAZY);\n\
         \x20 long long end = now();\n\
         \x20 if (!library) {{ fprintf(stderr, \"dlopen: %s\\n\", dlerror()); return 2; }}\n\
         \x20 int (*ready)(void) = (int (*)(void))dlsym(library, \"{READY}\");\n\
         \x20 if (!ready) {{ fprintf(stderr, \"dlsym: %s\\n\", dlerror()); return 2; }}\n\
         \x20 printf(\"%lld %d\\n\", end - start, ready());\n\
         \x20 return 0;\n\
         }}\n"
    )
}

/// The DT_NEEDED program: the time from the launcher's stamp to main.
fn program_source() -> String {
    format!(
        "/* coldstart loadcost: time from execve to main with the library as DT_NEEDED. */\n\
         {CLOCK}\
         extern int {READY}(void);\n\
         int main(void) {{\n\
         \x20 long long reached = now();\n\
         \x20 const char *stamp = getenv(\"{T0_VAR}\");\n\
         \x20 if (!stamp) {{ fputs(\"{T0_VAR} is not set: run through the launcher\\n\", stderr); return 2; }}\n\
         \x20 printf(\"%lld %d\\n\", reached - atoll(stamp), {READY}());\n\
         \x20 return 0;\n\
         }}\n"
    )
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn cc(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("cc")
        .args(args)
        .current_dir(dir)
        .output()
        .context("cannot run cc: coldstart loadcost builds its libraries with the system C compiler (apt-get install gcc)")?;
    if !output.status.success() {
        bail!(
            "cc {} in {} failed ({}):\n{}",
            args.join(" "),
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    Ok(())
}

fn compiler_version() -> anyhow::Result<String> {
    let output = Command::new("cc")
        .arg("--version")
        .output()
        .context("cannot run cc: coldstart loadcost builds its libraries with the system C compiler (apt-get install gcc)")?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or("cc")
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_exactly_n_entries() {
        for n in [0, 1, 15, 16, 17, 33] {
            let mut out = String::new();
            table(&mut out, "int *const", "t", n, |s, i| {
                let _ = write!(s, "&v{i}");
            });
            assert_eq!(out.matches("&v").count() as u64, n, "{out}");
            if n > 0 {
                let inner = &out[out.find('{').unwrap() + 1..out.rfind('}').unwrap()];
                let entries: Vec<&str> = inner.split(',').map(str::trim).collect();
                assert_eq!(entries.len() as u64, n, "{out}");
                assert!(entries.iter().all(|e| e.starts_with("&v")), "{out}");
            }
        }
    }

    #[test]
    fn parts_share_the_body_without_losing_any() {
        for parts in 1..=7 {
            let total: usize = (0..parts)
                .map(|p| part_source(p, parts, 1000, 33).matches("T+").count())
                .sum();
            assert_eq!(total, 1000);
            let functions: usize = (0..parts)
                .map(|p| part_source(p, parts, 1000, 33).matches("_sink = ").count())
                .sum();
            assert_eq!(functions, 33);
        }
    }
}
