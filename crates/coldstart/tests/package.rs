//! The Debian package packaging/build-deb makes, checked with Debian's own
//! tools and never installed on this machine: dpkg-deb lists and unpacks
//! it, man-db reads its man pages, bash parses its completion,
//! systemd-analyze verifies its unit in the unpacked tree, and its
//! maintainer scripts run against that tree through DPKG_ROOT.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use coldstart_testkit::{run_ok, skip};

const BINARIES: [&str; 2] = ["./usr/bin/coldstart", "./usr/bin/coldstart-run"];

/// Every file the package installs, as `dpkg-deb -c` names them.
const FILES: [&str; 10] = [
    "./usr/bin/coldstart",
    "./usr/bin/coldstart-run",
    "./lib/systemd/system/coldstart.service",
    "./usr/share/man/man1/coldstart.1.gz",
    "./usr/share/man/man1/coldstart-run.1.gz",
    "./usr/share/bash-completion/completions/coldstart",
    "./usr/share/zsh/vendor-completions/_coldstart",
    "./usr/share/fish/vendor_completions.d/coldstart.fish",
    "./usr/share/doc/coldstart/copyright",
    "./usr/share/doc/coldstart/changelog.gz",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The package built from the test's own (debug) binaries into a temporary
/// directory, and that tree unpacked beside it.
struct Package {
    dir: tempfile::TempDir,
    deb: PathBuf,
}

impl Package {
    fn build() -> Package {
        let coldstart = Path::new(env!("CARGO_BIN_EXE_coldstart"));
        let run = Path::new(env!("CARGO_BIN_EXE_coldstart-run"));
        let binaries = coldstart.parent().unwrap();
        assert_eq!(run.parent().unwrap(), binaries, "both binaries in one dir");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let built = run_ok(
            Command::new(repo().join("packaging/build-deb"))
                .arg("--binaries")
                .arg(binaries)
                .arg("--out")
                .arg(&out)
                // A debug binary is over 100 MiB with its debug info, and
                // still 25 MiB stripped, which xz takes half a minute over.
                .arg("--strip")
                .args(["--compress", "none"]),
        );
        let deb = PathBuf::from(stdout(&built).trim());
        let name = format!("coldstart_{}_{}.deb", debian_version(), architecture());
        assert_eq!(deb, out.join(name), "the path build-deb prints");
        assert!(deb.is_file(), "{} was not written", deb.display());
        // build-deb's staging directory is gone: the package alone is left.
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        Package { dir, deb }
    }

    /// `dpkg-deb -f` of one control field.
    fn field(&self, name: &str) -> String {
        let output = run_ok(Command::new("dpkg-deb").arg("-f").arg(&self.deb).arg(name));
        stdout(&output).trim().to_string()
    }

    /// The data files unpacked by `dpkg-deb -x` into `root/`.
    fn unpack(&self) -> PathBuf {
        let root = self.dir.path().join("root");
        run_ok(Command::new("dpkg-deb").arg("-x").arg(&self.deb).arg(&root));
        root
    }

    /// The control files (control, md5sums, maintainer scripts) unpacked by
    /// `dpkg-deb -e`.
    fn control(&self) -> PathBuf {
        let control = self.dir.path().join("control");
        run_ok(
            Command::new("dpkg-deb")
                .arg("-e")
                .arg(&self.deb)
                .arg(&control),
        );
        control
    }
}

/// The workspace version (this crate inherits it), as Debian writes it: a
/// semver pre-release's hyphen becomes a tilde.
fn debian_version() -> String {
    env!("CARGO_PKG_VERSION").replacen('-', "~", 1)
}

fn architecture() -> String {
    stdout(&run_ok(Command::new("dpkg").arg("--print-architecture")))
        .trim()
        .to_string()
}

/// One line of `dpkg-deb -c`: mode, owner/group, size, date, time, path.
#[derive(Debug)]
struct Listed {
    mode: String,
    owner: String,
    size: u64,
}

fn listing(deb: &Path) -> BTreeMap<String, Listed> {
    let output = run_ok(Command::new("dpkg-deb").arg("-c").arg(deb));
    stdout(&output)
        .lines()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert!(words.len() >= 6, "unexpected dpkg-deb -c line: {line}");
            let path = words[5..].join(" ");
            let listed = Listed {
                mode: words[0].to_string(),
                owner: words[1].to_string(),
                size: words[2].parse().unwrap(),
            };
            (path, listed)
        })
        .collect()
}

#[test]
fn the_package_installs_coldstart_and_its_service() {
    for tool in ["dpkg-deb", "dpkg"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return skip(&format!("{tool} is not installed"));
        }
    }
    let package = Package::build();
    lists_every_file_owned_by_root(&package);
    let root = package.unpack();
    has_honest_control_fields(&package, &root);
    man_pages_have_a_name_section(&root);
    completions_name_coldstart(&root);
    docs_hold_the_license_and_changelog(&root);
    unit_passes_systemd_analyze_verify(&root);
    maintainer_scripts_work_without_systemd(&package, &root);
    exec_start_runs_the_service(&root);
}

/// The unit's ExecStart line, as systemd would run it but with the
/// unpacked binary, starts the service, which says it serves and stops
/// cleanly on SIGTERM (systemd's stop). Its state directory is a tmpfs
/// over /var/lib in a private mount namespace: this machine's stays as
/// it is.
fn exec_start_runs_the_service(root: &Path) {
    if !coldstart_system::launch::is_root() {
        return skip("running the service's ExecStart line needs root (fanotify)");
    }
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/coldstart.service")).unwrap();
    let exec_start = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart line");
    let words: Vec<String> = exec_start
        .split_whitespace()
        .map(|w| match w.strip_prefix('/') {
            Some(path) if w == "/usr/bin/coldstart" => root.join(path).display().to_string(),
            _ => w.to_string(),
        })
        .collect();
    assert!(words.iter().any(|w| w == "serve"), "{exec_start}");
    let script = format!("mount -t tmpfs none /var/lib && exec {}", words.join(" "));
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("unshare starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    // SAFETY: a signal to our own child, by its pid (sh exec'd the service).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(
        first.contains("serving 0 program(s) from /var/lib/coldstart"),
        "{first}{rest}"
    );
    assert!(status.success(), "{status}: {first}{rest}");
    assert!(rest.contains("stopped"), "{rest}");
}

fn lists_every_file_owned_by_root(package: &Package) {
    let listed = listing(&package.deb);
    let files: BTreeSet<&str> = listed
        .iter()
        .filter(|(_, l)| l.mode.starts_with('-'))
        .map(|(path, _)| path.as_str())
        .collect();
    assert_eq!(files, FILES.into_iter().collect(), "the package's files");
    for (path, l) in &listed {
        assert_eq!(l.owner, "root/root", "{path}");
        let mode = if BINARIES.contains(&path.as_str()) {
            "-rwxr-xr-x"
        } else if l.mode.starts_with('d') {
            "drwxr-xr-x"
        } else {
            "-rw-r--r--"
        };
        assert_eq!(l.mode, mode, "{path}");
    }
    // Installed-Size as dpkg counts it: each file in KiB rounded up, each
    // directory one (the archive's root "./" not counted).
    let size: u64 = listed
        .iter()
        .filter(|(path, _)| path.as_str() != "./")
        .map(|(_, l)| {
            if l.mode.starts_with('-') {
                l.size.div_ceil(1024)
            } else {
                1
            }
        })
        .sum();
    assert_eq!(package.field("Installed-Size"), size.to_string());
}

fn has_honest_control_fields(package: &Package, root: &Path) {
    assert_eq!(package.field("Package"), "coldstart");
    assert_eq!(package.field("Version"), debian_version());
    assert_eq!(package.field("Architecture"), architecture());
    assert_eq!(package.field("Section"), "utils");
    assert_eq!(package.field("Priority"), "optional");
    assert!(!package.field("Maintainer").is_empty());
    let depends = package.field("Depends");
    let names: Vec<&str> = depends
        .split(',')
        .map(|d| d.split_whitespace().next().unwrap_or(""))
        .collect();
    assert!(names.contains(&"libc6"), "Depends: {depends}");
    // Every library the binaries need (readelf's NEEDED) is provided by a
    // package named in Depends, as dpkg -S finds it on this machine.
    let binaries: Vec<PathBuf> = BINARIES
        .iter()
        .map(|path| root.join(path.trim_start_matches("./")))
        .collect();
    for library in needed_libraries(&binaries) {
        let owner = owner_of_library(&library);
        assert!(
            names.contains(&owner.as_str()),
            "{library} comes from {owner}, not in Depends: {depends}"
        );
    }
    let description = package.field("Description");
    let lines: Vec<&str> = description.lines().collect();
    assert!(lines.len() > 2, "an extended description: {description}");
}

/// The DT_NEEDED names of `binaries`, from readelf.
fn needed_libraries(binaries: &[PathBuf]) -> BTreeSet<String> {
    let mut needed = BTreeSet::new();
    for binary in binaries {
        let output = run_ok(Command::new("readelf").arg("-dW").arg(binary));
        for line in stdout(&output).lines().filter(|l| l.contains("(NEEDED)")) {
            let name = line.split('[').nth(1).and_then(|s| s.split(']').next());
            needed.insert(name.expect("NEEDED [name]").to_string());
        }
    }
    assert!(!needed.is_empty(), "the binaries link libc dynamically");
    needed
}

/// The package (without its :arch) that holds `library`, found through
/// ldconfig's cache and dpkg's file lists.
fn owner_of_library(library: &str) -> String {
    let cache = stdout(&run_ok(Command::new("ldconfig").arg("-p")));
    for line in cache.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some(library) {
            continue;
        }
        let Some(path) = line.rsplit(" => ").next() else {
            continue;
        };
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
        for candidate in [PathBuf::from(path), canonical] {
            let output = Command::new("dpkg")
                .arg("-S")
                .arg(&candidate)
                .output()
                .unwrap();
            if output.status.success() {
                let text = stdout(&output);
                let owner = text.split(':').next().unwrap_or_default();
                return owner.trim().to_string();
            }
        }
    }
    panic!("no package on this machine holds {library}");
}

fn man_pages_have_a_name_section(root: &Path) {
    let pages = root.join("usr/share/man/man1");
    for (page, name) in [
        ("coldstart.1.gz", "coldstart"),
        ("coldstart-run.1.gz", "coldstart-run"),
    ] {
        let path = pages.join(page);
        // man-db's own reading of the NAME section, which whatis and
        // apropos index.
        let output = Command::new("lexgrog").arg(&path).output();
        if let Ok(output) = output {
            assert!(output.status.success(), "lexgrog {page}: {output:?}");
            let text = stdout(&output);
            assert!(
                text.contains(&format!("\"{name} - ")),
                "lexgrog {page}: {text}"
            );
        }
        let text = render_man_page(&path);
        // Justified text: words one space apart again.
        let lines: Vec<String> = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        let at = lines.iter().position(|l| *l == "NAME");
        let at = at.unwrap_or_else(|| panic!("{page} has no NAME section: {text}"));
        assert!(
            lines[at + 1].starts_with(&format!("{name} - ")),
            "{page}: {}",
            lines[at + 1]
        );
    }
}

/// The page as text: `man -l` where man-db is installed, else zcat | groff.
fn render_man_page(path: &Path) -> String {
    let man = Command::new("man")
        .arg("-l")
        .arg(path)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .env("MAN_DISABLE_SECCOMP", "1")
        .output();
    if let Ok(output) = man {
        assert!(
            output.status.success(),
            "man -l {}: {output:?}",
            path.display()
        );
        return stdout(&output);
    }
    let shell = format!(
        "zcat -- '{}' | groff -man -Tutf8 -P-c -P-b -P-u",
        path.display()
    );
    stdout(&run_ok(Command::new("sh").arg("-c").arg(shell)))
}

fn completions_name_coldstart(root: &Path) {
    for path in FILES.iter().filter(|p| p.contains("completion")) {
        let path = root.join(path.trim_start_matches("./"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("coldstart"), "{}", path.display());
    }
    let bash = root.join("usr/share/bash-completion/completions/coldstart");
    run_ok(Command::new("bash").arg("-n").arg(&bash));
    // Sourced, it registers a completion for the command named coldstart.
    let script = format!("source '{}' && complete -p coldstart", bash.display());
    let output = run_ok(Command::new("bash").arg("-c").arg(script));
    assert!(
        stdout(&output).trim_end().ends_with(" coldstart"),
        "{output:?}"
    );
}

fn docs_hold_the_license_and_changelog(root: &Path) {
    let copyright =
        std::fs::read_to_string(root.join("usr/share/doc/coldstart/copyright")).unwrap();
    assert!(copyright.starts_with(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
    ));
    assert!(copyright.contains("\nFiles: *\n"), "{copyright}");
    assert!(copyright.contains("\nLicense: MIT\n"), "{copyright}");
    // Each line of LICENSE after its title is there, indented by one space
    // (blank lines as " .").
    let license = std::fs::read_to_string(repo().join("LICENSE")).unwrap();
    for line in license.lines().skip(1).filter(|l| !l.is_empty()) {
        assert!(copyright.contains(&format!("\n {line}\n")), "{line}");
    }
    let holder = license
        .lines()
        .find_map(|l| l.strip_prefix("Copyright (c) "))
        .unwrap();
    assert!(copyright.contains(&format!("\nCopyright: {holder}\n")));
    // The changelog is gzip'd text naming this version.
    let changelog = root.join("usr/share/doc/coldstart/changelog.gz");
    let text = stdout(&run_ok(Command::new("zcat").arg(&changelog)));
    let first = format!("coldstart ({}) ", debian_version());
    assert!(text.starts_with(&first), "{text}");
}

fn unit_passes_systemd_analyze_verify(root: &Path) {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        return skip("systemd-analyze is not installed (package systemd)");
    }
    let host_units = Path::new("/lib/systemd/system");
    if !host_units.join("multi-user.target").exists() {
        return skip("no /lib/systemd/system/multi-user.target to verify the unit against");
    }
    // verify --root looks up ExecStart= in the root, so the unpacked
    // /usr/bin/coldstart is the one checked; the units the service is
    // ordered after come from this machine's systemd. The man page of
    // Documentation= is looked up through MANPATH.
    let units = root.join("lib/systemd/system");
    run_ok(
        Command::new("cp")
            .args(["-a", "--no-clobber", "--"])
            .arg(host_units.join("."))
            .arg(&units),
    );
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg(units.join("coldstart.service"))
        .env("MANPATH", root.join("usr/share/man"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "systemd-analyze verify: {said}");
    assert_eq!(said, "", "systemd-analyze verify warned");
}

/// Paths on this machine the maintainer scripts would touch without
/// DPKG_ROOT: none may appear, change or go while they run against the
/// unpacked tree.
const HOST_PATHS: [&str; 4] = [
    "/etc/systemd/system/multi-user.target.wants/coldstart.service",
    "/etc/systemd/system/coldstart.service",
    "/var/lib/systemd/deb-systemd-helper-enabled/coldstart.service.dsh-also",
    "/var/lib/coldstart",
];

fn host_state() -> Vec<Option<std::fs::Metadata>> {
    HOST_PATHS
        .iter()
        .map(|p| std::fs::symlink_metadata(p).ok())
        .collect()
}

fn maintainer_scripts_work_without_systemd(package: &Package, root: &Path) {
    let control = package.control();
    for script in ["postinst", "prerm", "postrm"] {
        let path = control.join(script);
        let mode = std::os::unix::fs::PermissionsExt::mode(&path.metadata().unwrap().permissions());
        assert_eq!(mode & 0o777, 0o755, "{script}");
        run_ok(Command::new("sh").arg("-n").arg(&path));
    }
    let before = host_state();
    let run = |script: &str, args: &[&str]| {
        run_ok(
            Command::new(control.join(script))
                .args(args)
                .env("DPKG_ROOT", root)
                .env("DPKG_MAINTSCRIPT_NAME", script)
                .env("DPKG_MAINTSCRIPT_PACKAGE", "coldstart"),
        )
    };
    let helper = Command::new("deb-systemd-helper")
        .arg("--help")
        .output()
        .is_ok();
    let etc = root.join("etc/systemd/system");
    let wants = etc.join("multi-user.target.wants/coldstart.service");
    let mask = etc.join("coldstart.service");
    let state = root.join("var/lib/coldstart");

    run("postinst", &["configure", ""]);
    if helper {
        // Enabled as its [Install] section says: a link in the wants of
        // WantedBy=multi-user.target.
        assert_eq!(
            std::fs::read_link(&wants).unwrap(),
            Path::new("/lib/systemd/system/coldstart.service")
        );
    } else {
        skip("deb-systemd-helper is not installed (package init-system-helpers)");
    }
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("learned"), b"plans").unwrap();

    run("prerm", &["remove"]);
    run("postrm", &["remove"]);
    assert!(state.join("learned").exists(), "a removal keeps the state");
    if helper {
        assert_eq!(std::fs::read_link(&mask).unwrap(), Path::new("/dev/null"));
    }

    run("postrm", &["purge"]);
    assert!(!state.exists(), "a purge removes {}", state.display());
    assert!(std::fs::symlink_metadata(&mask).is_err(), "purge unmasks");
    assert!(std::fs::symlink_metadata(&wants).is_err(), "purge disables");

    let after = host_state();
    for ((path, before), after) in HOST_PATHS.iter().zip(&before).zip(&after) {
        let same = match (before, after) {
            (None, None) => true,
            (Some(b), Some(a)) => b.modified().ok() == a.modified().ok(),
            _ => false,
        };
        assert!(same, "the scripts touched {path} on this machine");
    }
}
