//! Compiles and links a generated sample app with g++ or clang++.
//!
//! Objects are compiled in parallel and kept between builds: each object has
//! a key file holding a hash of the compiler, its flags and its sources, and
//! is only recompiled when the key changes. Links are skipped the same way,
//! so relinking with new link flags costs only the link.

use std::fs;
use std::io::ErrorKind;
use std::num::NonZero;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use anyhow::{Context, Result, anyhow, bail};

use crate::design::init_function;
use crate::manifest::{BuildRecord, GroundTruth, MANIFEST_FILE, Module};
use crate::write_if_changed;

/// The C++ compiler driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compiler {
    /// `g++`, Debian package `g++`.
    #[default]
    Gcc,
    /// `clang++`, Debian package `clang`.
    Clang,
}

impl Compiler {
    /// The command that is run.
    pub fn driver(self) -> &'static str {
        match self {
            Compiler::Gcc => "g++",
            Compiler::Clang => "clang++",
        }
    }

    fn package(self) -> &'static str {
        match self {
            Compiler::Gcc => "g++",
            Compiler::Clang => "clang",
        }
    }

    /// Whether the driver is on `PATH` and runs.
    pub fn is_installed(self) -> bool {
        Command::new(self.driver())
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}

/// The command that compiles and links: the compiler's usual driver, or
/// the one [`BuildOptions::driver`] names.
#[derive(Debug, Clone)]
struct Driver {
    program: String,
    package: &'static str,
}

impl Driver {
    fn of(options: &BuildOptions) -> Driver {
        Driver {
            program: options
                .driver
                .clone()
                .unwrap_or_else(|| options.compiler.driver().to_string()),
            package: options.compiler.package(),
        }
    }

    /// First line of `--version`, or an error saying what to install.
    fn version(&self) -> Result<String> {
        let output = match Command::new(&self.program).arg("--version").output() {
            Ok(output) => output,
            Err(error) if error.kind() == ErrorKind::NotFound => bail!(
                "the C++ compiler `{}` is not installed (not found on PATH); install it with \
                 `apt-get install {}`",
                self.program,
                self.package
            ),
            Err(error) => {
                return Err(error).with_context(|| format!("running `{} --version`", self.program));
            }
        };
        if !output.status.success() {
            bail!(
                "`{} --version` failed ({}): {}",
                self.program,
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&output.stdout);
        Ok(text.lines().next().unwrap_or_default().trim().to_string())
    }

    /// Runs the driver; a failure carries the command and its stderr.
    fn run(&self, arguments: &[String], what: &str) -> Result<()> {
        let output = Command::new(&self.program)
            .args(arguments)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| match error.kind() {
                ErrorKind::NotFound => anyhow!(
                    "{what}: `{}` is not installed; install it with `apt-get install {}`",
                    self.program,
                    self.package
                ),
                _ => anyhow!(error).context(format!("{what}: running `{}`", self.program)),
            })?;
        if !output.status.success() {
            bail!(
                "{what} failed ({})\ncommand: {} {}\n{}",
                output.status,
                self.program,
                arguments.join(" "),
                String::from_utf8_lossy(&output.stderr).trim_end()
            );
        }
        Ok(())
    }
}

/// How to build the sample app.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildOptions {
    pub compiler: Compiler,
    /// The driver to run instead of the compiler's usual one, a path or a
    /// name on `PATH` of the same family: `clang++-19` for the block maps
    /// and basic-block sections Debian 12's clang 14 lacks.
    pub driver: Option<String>,
    /// Optimisation level without the `-O`: `0`, `1`, `2`, `3`, `s`, `z`, `g` or `fast`.
    pub opt_level: String,
    /// `-g` instead of `-g0`. Symbols are kept either way: nothing is stripped.
    pub debug_info: bool,
    /// Link both binaries with `-Wl,-z,pack-relative-relocs` (RELR).
    pub pack_relative_relocs: bool,
    /// Added after the generator's own compile flags, for every unit.
    pub extra_cflags: Vec<String>,
    /// Added at the end of both link commands, e.g. `-fuse-ld=gold`.
    pub extra_ldflags: Vec<String>,
    /// Added after those to the library's link only, e.g. its order file.
    pub library_ldflags: Vec<String>,
    /// Added after those to the executable's link only.
    pub executable_ldflags: Vec<String>,
    /// Compilers run at once; 0 counts as 1.
    pub jobs: usize,
    /// Another build directory of the same sources: an object or part
    /// library whose key matches the one there (same compiler, flags and
    /// source) is copied from it instead of compiled. A relink with other
    /// link flags (an order file) then compiles nothing.
    pub reuse_from: Option<PathBuf>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            compiler: Compiler::Gcc,
            driver: None,
            opt_level: "2".to_string(),
            debug_info: false,
            pack_relative_relocs: false,
            extra_cflags: Vec::new(),
            extra_ldflags: Vec::new(),
            library_ldflags: Vec::new(),
            executable_ldflags: Vec::new(),
            jobs: thread::available_parallelism().map_or(1, NonZero::get),
            reuse_from: None,
        }
    }
}

const OPT_LEVELS: [&str; 8] = ["0", "1", "2", "3", "s", "z", "g", "fast"];

/// Progress of a build, for a progress bar.
#[derive(Debug, Clone, PartialEq)]
pub enum BuildEvent {
    /// Sent first: `to_compile` of the `objects` are out of date.
    Planned { objects: usize, to_compile: usize },
    /// One object was compiled; `done` counts up to `to_compile`.
    Compiled {
        source: String,
        done: usize,
        to_compile: usize,
    },
    /// A binary is being linked (only sent when it is out of date).
    Linking { output: PathBuf },
}

/// A built sample app.
#[derive(Debug, Clone)]
pub struct BuiltApp {
    pub executable: PathBuf,
    pub library: PathBuf,
    /// The part libraries, in index order; the executable needs each.
    pub parts: Vec<PathBuf>,
    pub build_dir: PathBuf,
    /// The manifest, with [`GroundTruth::build`] filled in; also written to
    /// `manifest.json` in the build directory.
    pub ground_truth: GroundTruth,
}

impl BuiltApp {
    /// Every binary of the app: the executable, the library and the parts.
    pub fn binaries(&self) -> Vec<PathBuf> {
        let mut binaries = vec![self.executable.clone(), self.library.clone()];
        binaries.extend(self.parts.iter().cloned());
        binaries
    }

    /// A command that runs the executable from the build directory; add
    /// environment variables (say `LD_PRELOAD`) before running it.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.executable);
        command.current_dir(&self.build_dir);
        command
    }

    /// Runs the executable once and checks that it exits 0 after printing `READY`.
    pub fn run(&self) -> Result<Output> {
        let output = self
            .command()
            .output()
            .with_context(|| format!("running {}", self.executable.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !stdout.lines().any(|line| line == "READY") {
            bail!(
                "{} did not exit 0 after printing READY ({}):\nstdout: {}\nstderr: {}",
                self.executable.display(),
                output.status,
                stdout.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(output)
    }
}

/// Builds the app generated in `source_dir` into `build_dir`, reusing
/// whatever an earlier build there left up to date.
pub fn build(
    source_dir: &Path,
    build_dir: &Path,
    options: &BuildOptions,
    progress: &mut dyn FnMut(BuildEvent),
) -> Result<BuiltApp> {
    if !OPT_LEVELS.contains(&options.opt_level.as_str()) {
        bail!(
            "opt_level must be one of {} (without the -O), got `{}`",
            OPT_LEVELS.join(", "),
            options.opt_level
        );
    }
    let mut truth = GroundTruth::read(&source_dir.join(MANIFEST_FILE))?;
    let generated_assembly = !truth.parts.is_empty() || truth.spec.cold_code_kib > 0;
    if generated_assembly && !cfg!(target_arch = "x86_64") {
        bail!(
            "the sample app's part libraries and cold code are x86-64 assembly, and this is {}: \
             generate it with no parts and no cold code",
            std::env::consts::ARCH
        );
    }
    let toolchain = Toolchain::find(options)?;
    let (source_dir, build_dir) = directories(source_dir, build_dir)?;

    let header_path = source_dir.join(&truth.header);
    let planner = ObjectPlanner {
        toolchain: &toolchain,
        flags: compile_flags(options, &source_dir),
        header: fs::read(&header_path)
            .with_context(|| format!("reading {}", header_path.display()))?,
        source_dir: &source_dir,
        object_dir: build_dir.join(OBJECT_DIR),
        build_dir: &build_dir,
        reuse_from: options.reuse_from.as_deref(),
    };
    let mut objects = vec![
        planner.plan(&truth.library.support_source, Some(Module::Library))?,
        planner.plan(&truth.executable.support_source, Some(Module::Executable))?,
    ];
    for unit in &truth.translation_units {
        objects.push(planner.plan(&unit.source, Some(unit.module))?);
    }
    let mut parts = Vec::new();
    for part in &truth.parts {
        let output = build_dir.join(&part.output);
        objects.push(planner.plan_part(&part.source, &output, options)?);
        parts.push(output);
    }
    let to_compile: Vec<&ObjectJob> = objects.iter().filter(|job| job.stale).collect();
    progress(BuildEvent::Planned {
        objects: objects.len(),
        to_compile: to_compile.len(),
    });
    compile_all(&to_compile, options.jobs.max(1), progress)?;

    let linker = Linker {
        toolchain: &toolchain,
        objects: &objects,
        link_flags: link_flags(options),
        options,
    };
    let library = build_dir.join(&truth.library.output);
    let executable = build_dir.join(&truth.executable.output);
    let library_key = linker.library(&library, &truth.library.output, progress)?;
    let mut depends_on = library_key;
    for job in objects.iter().filter(|job| job.module.is_none()) {
        depends_on.push_str(&job.key);
    }
    linker.executable(&executable, &library, &parts, &depends_on, progress)?;

    name_initializers(&mut truth, options);
    truth.build = Some(BuildRecord {
        compiler: toolchain.driver.program.clone(),
        compiler_version: toolchain.version.clone(),
        compile_flags: planner.flags,
        link_flags: linker.link_flags,
        library: library.clone(),
        executable: executable.clone(),
        parts: parts.clone(),
    });
    write_if_changed(&build_dir.join(MANIFEST_FILE), &truth.to_json()?)?;
    Ok(BuiltApp {
        executable,
        library,
        parts,
        build_dir,
        ground_truth: truth,
    })
}

/// The source and build directories as absolute paths, the build
/// directory's object directory created.
fn directories(source_dir: &Path, build_dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let source_dir = fs::canonicalize(source_dir)
        .with_context(|| format!("resolving the source directory {}", source_dir.display()))?;
    fs::create_dir_all(build_dir.join(OBJECT_DIR))
        .with_context(|| format!("creating the build directory {}", build_dir.display()))?;
    let build_dir = fs::canonicalize(build_dir)
        .with_context(|| format!("resolving the build directory {}", build_dir.display()))?;
    Ok((source_dir, build_dir))
}

/// Links the two modules from their objects.
struct Linker<'a> {
    toolchain: &'a Toolchain,
    objects: &'a [ObjectJob],
    link_flags: Vec<String>,
    options: &'a BuildOptions,
}

impl Linker<'_> {
    fn objects_of(&self, module: Module) -> impl Iterator<Item = &ObjectJob> {
        self.objects
            .iter()
            .filter(move |job| job.module == Some(module))
    }

    /// The shared library, named `soname`; returns its link key, which the
    /// executable's link depends on.
    fn library(
        &self,
        library: &Path,
        soname: &str,
        progress: &mut dyn FnMut(BuildEvent),
    ) -> Result<String> {
        let mut arguments = vec!["-shared".to_string(), format!("-Wl,-soname,{soname}")];
        arguments.extend(output_then_objects(
            library,
            self.objects_of(Module::Library),
        ));
        arguments.extend(self.link_flags.iter().cloned());
        arguments.extend(self.options.library_ldflags.iter().cloned());
        self.toolchain.link(
            library,
            &arguments,
            self.objects_of(Module::Library),
            "",
            progress,
        )
    }

    /// The position-independent executable, linked against `library` and
    /// the `parts`; `depends_on` holds their keys.
    fn executable(
        &self,
        executable: &Path,
        library: &Path,
        parts: &[PathBuf],
        depends_on: &str,
        progress: &mut dyn FnMut(BuildEvent),
    ) -> Result<String> {
        let mut arguments = vec!["-pie".to_string()];
        arguments.extend(output_then_objects(
            executable,
            self.objects_of(Module::Executable),
        ));
        // The executable finds the library next to itself, wherever the build
        // directory is, with no LD_LIBRARY_PATH.
        arguments.push(library.display().to_string());
        arguments.extend(parts.iter().map(|part| part.display().to_string()));
        arguments.push("-Wl,-rpath,$ORIGIN".to_string());
        arguments.extend(self.link_flags.iter().cloned());
        arguments.extend(self.options.executable_ldflags.iter().cloned());
        self.toolchain.link(
            executable,
            &arguments,
            self.objects_of(Module::Executable),
            depends_on,
            progress,
        )
    }
}

/// Each static initializer's function as this compiler names it: gcc
/// names the executable's after the unit's first global, not its file.
fn name_initializers(truth: &mut GroundTruth, options: &BuildOptions) {
    for init in &mut truth.static_initializers {
        let source = &truth.translation_units[init.tu as usize].source;
        let named_after_file =
            options.compiler == Compiler::Clang || init.module == Module::Library;
        init.init_function = Some(init_function(source, named_after_file));
    }
}

const OBJECT_DIR: &str = "obj";
const KEY_SUFFIX: &str = ".key";

/// Flags every unit is compiled with; `-fPIC` or `-fPIE` come on top.
fn compile_flags(options: &BuildOptions, source_dir: &Path) -> Vec<String> {
    let mut flags = vec![
        "-std=c++17".to_string(),
        format!("-O{}", options.opt_level),
        "-ffunction-sections".to_string(),
        "-fdata-sections".to_string(),
        if options.debug_info { "-g" } else { "-g0" }.to_string(),
        format!("-I{}", source_dir.display()),
    ];
    flags.extend(options.extra_cflags.iter().cloned());
    flags
}

fn link_flags(options: &BuildOptions) -> Vec<String> {
    let mut flags = Vec::new();
    if options.pack_relative_relocs {
        flags.push("-Wl,-z,pack-relative-relocs".to_string());
    }
    flags.extend(options.extra_ldflags.iter().cloned());
    flags
}

fn output_then_objects<'a>(
    output: &Path,
    objects: impl Iterator<Item = &'a ObjectJob>,
) -> Vec<String> {
    let mut arguments = vec!["-o".to_string(), output.display().to_string()];
    arguments.extend(objects.map(|job| job.object.display().to_string()));
    arguments
}

/// The compiler driver, identified well enough that a compiler upgrade
/// invalidates every object built by the old one.
struct Toolchain {
    driver: Driver,
    version: String,
}

impl Toolchain {
    fn find(options: &BuildOptions) -> Result<Toolchain> {
        let driver = Driver::of(options);
        let version = driver.version()?;
        Ok(Toolchain { driver, version })
    }

    fn hash(&self) -> Fnv64 {
        let mut hash = Fnv64::new();
        hash.write(self.driver.program.as_bytes());
        hash.write(self.version.as_bytes());
        hash
    }

    /// Links `output` unless its key says it is already up to date, and
    /// returns the key. The key covers the command, the inputs' keys and
    /// `depends_on` (the library's key, for the executable).
    fn link<'a>(
        &self,
        output: &Path,
        arguments: &[String],
        inputs: impl Iterator<Item = &'a ObjectJob>,
        depends_on: &str,
        progress: &mut dyn FnMut(BuildEvent),
    ) -> Result<String> {
        let mut hash = self.hash();
        for argument in arguments {
            hash.write(argument.as_bytes());
        }
        for input in inputs {
            hash.write(input.key.as_bytes());
        }
        hash.write(depends_on.as_bytes());
        let key = hash.hex();
        if output.exists() && read_key(output).as_deref() == Some(key.as_str()) {
            return Ok(key);
        }
        progress(BuildEvent::Linking {
            output: output.to_path_buf(),
        });
        remove_key(output)?;
        let name = output.file_name().map_or_else(
            || output.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        self.driver.run(arguments, &format!("linking {name}"))?;
        write_key(output, &key)?;
        Ok(key)
    }
}

/// Decides, per source, the compile command and whether it must run.
struct ObjectPlanner<'a> {
    toolchain: &'a Toolchain,
    /// Flags for every source; the module's `-fPIC` or `-fPIE` is added.
    flags: Vec<String>,
    /// Every source includes it, so it is part of every object's key.
    header: Vec<u8>,
    source_dir: &'a Path,
    object_dir: PathBuf,
    build_dir: &'a Path,
    /// [`BuildOptions::reuse_from`].
    reuse_from: Option<&'a Path>,
}

impl ObjectPlanner<'_> {
    /// Whether `artifact` (in this build directory) must be built for
    /// `key`: not when it is there with that key, or when the same file
    /// of the build to reuse from has that key and was copied here.
    fn stale(&self, artifact: &Path, key: &str) -> Result<bool> {
        if artifact.exists() && read_key(artifact).as_deref() == Some(key) {
            return Ok(false);
        }
        let Some(other) = self.reuse_from.and_then(|from| {
            let relative = artifact.strip_prefix(self.build_dir).ok()?;
            Some(from.join(relative))
        }) else {
            return Ok(true);
        };
        if !other.exists() || read_key(&other).as_deref() != Some(key) {
            return Ok(true);
        }
        // The key last: a copy cut short leaves the artifact without it.
        remove_key(artifact)?;
        fs::copy(&other, artifact)
            .with_context(|| format!("copying {} to {}", other.display(), artifact.display()))?;
        write_key(artifact, key)?;
        Ok(false)
    }

    fn read(&self, source_name: &str) -> Result<(PathBuf, Vec<u8>)> {
        let source = self.source_dir.join(source_name);
        let text = fs::read(&source).with_context(|| {
            format!(
                "reading {}; generate the sources again if it is missing",
                source.display()
            )
        })?;
        Ok((source, text))
    }

    /// A part library, assembled and linked in one command into `output`.
    /// It is linked the same way whatever the app's other link flags (an
    /// order file, another linker), so that builds compared with each
    /// other have the same parts; only RELR packing applies to it too.
    fn plan_part(
        &self,
        source_name: &str,
        output: &Path,
        options: &BuildOptions,
    ) -> Result<ObjectJob> {
        let (source, text) = self.read(source_name)?;
        let soname = output.file_name().map_or_else(
            || output.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        let mut arguments = vec![
            "-shared".to_string(),
            "-nostdlib".to_string(),
            format!("-Wl,-soname,{soname}"),
            "-Wl,-z,noexecstack".to_string(),
        ];
        if options.pack_relative_relocs {
            arguments.push("-Wl,-z,pack-relative-relocs".to_string());
        }
        let mut hash = self.toolchain.hash();
        for argument in &arguments {
            hash.write(argument.as_bytes());
        }
        hash.write(&text);
        let key = hash.hex();
        arguments.extend([
            "-o".to_string(),
            output.display().to_string(),
            source.display().to_string(),
        ]);
        let stale = self.stale(output, &key)?;
        Ok(ObjectJob {
            source_name: source_name.to_string(),
            module: None,
            driver: self.toolchain.driver.clone(),
            arguments,
            object: output.to_path_buf(),
            key,
            stale,
        })
    }

    fn plan(&self, source_name: &str, module: Option<Module>) -> Result<ObjectJob> {
        let (source, text) = self.read(source_name)?;
        let stem = source_name.strip_suffix(".cpp").unwrap_or(source_name);
        let object = self.object_dir.join(format!("{stem}.o"));
        let mut arguments = self.flags.clone();
        arguments.push(
            match module {
                Some(Module::Executable) => "-fPIE",
                _ => "-fPIC",
            }
            .to_string(),
        );
        let mut hash = self.toolchain.hash();
        for argument in &arguments {
            hash.write(argument.as_bytes());
        }
        hash.write(&self.header);
        hash.write(&text);
        let key = hash.hex();
        arguments.extend([
            "-c".to_string(),
            source.display().to_string(),
            "-o".to_string(),
            object.display().to_string(),
        ]);
        let stale = self.stale(&object, &key)?;
        Ok(ObjectJob {
            source_name: source_name.to_string(),
            module,
            driver: self.toolchain.driver.clone(),
            arguments,
            object,
            key,
            stale,
        })
    }
}

/// One object, or one part library: how to build it and whether it must be.
struct ObjectJob {
    source_name: String,
    /// The module the object is linked into; `None` for a part library,
    /// which its one command assembles and links.
    module: Option<Module>,
    driver: Driver,
    arguments: Vec<String>,
    object: PathBuf,
    key: String,
    stale: bool,
}

impl ObjectJob {
    fn compile(&self) -> Result<()> {
        // Dropping the key first means a failed or interrupted compile is
        // retried next time rather than trusted.
        remove_key(&self.object)?;
        let what = match self.module {
            Some(Module::Library) => "compiling {} (library)",
            Some(Module::Executable) => "compiling {} (executable)",
            None => "assembling and linking the part library {}",
        };
        self.driver
            .run(&self.arguments, &what.replace("{}", &self.source_name))?;
        write_key(&self.object, &self.key)
    }
}

/// Runs the stale compiles on `jobs` threads. Results come back over a
/// channel so that `progress` runs on the caller's thread only.
fn compile_all(
    objects: &[&ObjectJob],
    jobs: usize,
    progress: &mut dyn FnMut(BuildEvent),
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let (sender, receiver) = mpsc::channel::<(usize, Result<()>)>();
    thread::scope(|scope| {
        for _ in 0..jobs.min(objects.len()) {
            let sender = sender.clone();
            let (next, failed) = (&next, &failed);
            scope.spawn(move || {
                while !failed.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = objects.get(index) else { break };
                    let result = job.compile();
                    if result.is_err() {
                        // The other workers finish what they run, then stop.
                        failed.store(true, Ordering::Relaxed);
                    }
                    if sender.send((index, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);

        let mut done = 0;
        let mut first_error = None;
        for (index, result) in receiver {
            match result {
                Ok(()) => {
                    done += 1;
                    progress(BuildEvent::Compiled {
                        source: objects[index].source_name.clone(),
                        done,
                        to_compile: objects.len(),
                    });
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    })
}

fn key_path(artifact: &Path) -> PathBuf {
    let mut path = artifact.as_os_str().to_owned();
    path.push(KEY_SUFFIX);
    PathBuf::from(path)
}

/// The stored key, or `None` if there is none to trust.
fn read_key(artifact: &Path) -> Option<String> {
    fs::read_to_string(key_path(artifact)).ok()
}

fn write_key(artifact: &Path, key: &str) -> Result<()> {
    let path = key_path(artifact);
    fs::write(&path, key).with_context(|| format!("writing {}", path.display()))
}

fn remove_key(artifact: &Path) -> Result<()> {
    let path = key_path(artifact);
    match fs::remove_file(&path) {
        Err(error) if error.kind() != ErrorKind::NotFound => {
            Err(error).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// 64-bit FNV-1a: stable across Rust versions, unlike `DefaultHasher`, so
/// keys written by one toolchain are still valid after an upgrade. Each write
/// ends with a separator byte so `["ab", "c"]` and `["a", "bc"]` differ.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, field: &[u8]) {
        self.write_bytes(field);
        self.write_bytes(&[0xff]);
    }

    fn write_bytes(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_vector() {
        // FNV-1a 64 of "a" and "foobar", from Fowler, Noll and Vo's test suite.
        let mut a = Fnv64::new();
        a.write_bytes(b"a");
        assert_eq!(a.0, 0xaf63_dc4c_8601_ec8c);
        let mut foobar = Fnv64::new();
        foobar.write_bytes(b"foobar");
        assert_eq!(foobar.0, 0x8594_4171_f739_67e8);
    }

    #[test]
    fn separators_keep_argument_boundaries() {
        let mut split_late = Fnv64::new();
        split_late.write(b"ab");
        split_late.write(b"c");
        let mut split_early = Fnv64::new();
        split_early.write(b"a");
        split_early.write(b"bc");
        assert_ne!(split_late.hex(), split_early.hex());
    }

    #[test]
    fn a_directory_without_a_manifest_says_so() {
        let dir = tempfile::tempdir().expect("tmp");
        let error = build(
            dir.path(),
            &dir.path().join("build"),
            &BuildOptions::default(),
            &mut |_| {},
        )
        .expect_err("nothing generated");
        assert!(format!("{error:#}").contains("manifest.json"), "{error:#}");
    }

    #[test]
    fn refuses_an_unknown_opt_level() {
        let options = BuildOptions {
            opt_level: "-O2".to_string(),
            ..BuildOptions::default()
        };
        let error = build(
            Path::new("/nonexistent"),
            Path::new("/nonexistent"),
            &options,
            &mut |_| {},
        )
        .expect_err("bad level");
        assert!(format!("{error:#}").contains("opt_level must be one of"));
    }
}
