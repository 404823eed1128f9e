//! What starts a program with its plan: the wrapper to exec (the small
//! coldstart-run beside coldstart, else `coldstart run`), and the text of a
//! launcher script that starts a program through it and falls back to a
//! plain start when coldstart or the plan is gone.

use crate::replay::Method;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The program that starts another with a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapper {
    pub path: PathBuf,
    /// " run" for coldstart itself, "" for coldstart-run.
    pub subcommand: &'static str,
}

impl Wrapper {
    /// The coldstart-run wrapper beside `coldstart` when it is there (it
    /// reads about 1.7 MiB cold where coldstart reads about 17 MiB), else
    /// `coldstart run`.
    pub fn beside(coldstart: PathBuf) -> Wrapper {
        let small = coldstart.with_file_name("coldstart-run");
        if small.is_file() {
            Wrapper {
                path: small,
                subcommand: "",
            }
        } else {
            Wrapper {
                path: coldstart,
                subcommand: " run",
            }
        }
    }

    /// Whether this is the small coldstart-run rather than `coldstart run`.
    pub fn is_small(&self) -> bool {
        self.subcommand.is_empty()
    }

    /// The command line that starts `command` with `plan` through it, with
    /// `flags` (of coldstart run's, such as `--no-read-around`) before the
    /// plan.
    pub fn argv(&self, flags: &[&str], plan: &Path, command: &[OsString]) -> Vec<OsString> {
        let mut argv = vec![self.path.clone().into_os_string()];
        if !self.is_small() {
            argv.push("run".into());
        }
        argv.extend(flags.iter().map(OsString::from));
        argv.extend(["--plan".into(), plan.as_os_str().to_owned(), "--".into()]);
        argv.extend(command.iter().cloned());
        argv
    }
}

/// A word that cannot be written as one shell word.
#[derive(Debug, thiserror::Error)]
#[error("{text:?} cannot be quoted for the shell")]
pub struct Unquotable {
    pub text: String,
}

/// What a launcher script starts, and how.
#[derive(Debug, Clone)]
pub struct LauncherScript<'a> {
    pub wrapper: &'a Wrapper,
    /// The plan, by an absolute path: the script may run from anywhere.
    pub plan: &'a Path,
    pub command: &'a [OsString],
    pub threads: Option<usize>,
    pub method: Method,
    /// --lead-kb, --window-kb and --no-read-around as given; each is
    /// written only when it is not the default.
    pub lead_kb: u64,
    pub window_kb: u64,
    pub no_read_around: bool,
}

/// The text of a shell script that starts `script.command` through the
/// wrapper with the plan, or unchanged when either is missing.
pub fn launcher_script(script: &LauncherScript<'_>) -> Result<String, Unquotable> {
    let quote = |text: &str| -> Result<String, Unquotable> {
        shlex::try_quote(text)
            .map(|q| q.into_owned())
            .map_err(|_| Unquotable {
                text: text.to_string(),
            })
    };
    let command = script
        .command
        .iter()
        .map(|a| quote(&a.to_string_lossy()))
        .collect::<Result<Vec<_>, _>>()?
        .join(" ");
    let mut options = String::new();
    if let Some(threads) = script.threads {
        options.push_str(&format!(" --threads {threads}"));
    }
    if script.method != Method::Readahead {
        options.push_str(&format!(" --method {}", script.method.as_str()));
    }
    if script.lead_kb != 0 {
        options.push_str(&format!(" --lead-kb {}", script.lead_kb));
    }
    if script.window_kb * 1024 != crate::replay::DEFAULT_WINDOW_BYTES {
        options.push_str(&format!(" --window-kb {}", script.window_kb));
    }
    if script.no_read_around {
        options.push_str(" --no-read-around");
    }
    Ok(format!(
        "#!/bin/sh\n\
         # Starts {program} while coldstart prefetches what its start needs\n\
         # (written by coldstart {version}). Without coldstart or the plan, the\n\
         # program starts unchanged.\n\
         launcher={launcher}\n\
         plan={plan}\n\
         if [ -x \"$launcher\" ] && [ -r \"$plan\" ]; then\n\
         \x20   exec \"$launcher\"{subcommand} --plan \"$plan\"{options} -- {command} \"$@\"\n\
         fi\n\
         exec {command} \"$@\"\n",
        program = script
            .command
            .first()
            .map(|p| p.to_string_lossy())
            .unwrap_or_default(),
        version = env!("CARGO_PKG_VERSION"),
        launcher = quote(&script.wrapper.path.to_string_lossy())?,
        subcommand = script.wrapper.subcommand,
        plan = quote(&script.plan.to_string_lossy())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_quotes_its_words_and_falls_back_to_a_plain_start() {
        let wrapper = Wrapper {
            path: PathBuf::from("/opt/cold start/coldstart"),
            subcommand: " run",
        };
        let command = [OsString::from("/usr/bin/app"), OsString::from("it's")];
        let text = launcher_script(&LauncherScript {
            wrapper: &wrapper,
            plan: Path::new("/plans/app.plan"),
            command: &command,
            threads: Some(4),
            method: Method::Readahead,
            lead_kb: 0,
            window_kb: 2048,
            no_read_around: false,
        })
        .unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "#!/bin/sh");
        assert_eq!(lines[4], "launcher='/opt/cold start/coldstart'");
        assert_eq!(lines[5], "plan=/plans/app.plan");
        assert_eq!(
            lines[7],
            "    exec \"$launcher\" run --plan \"$plan\" --threads 4 -- /usr/bin/app \"it's\" \"$@\""
        );
        assert_eq!(lines[9], "exec /usr/bin/app \"it's\" \"$@\"");
    }

    #[test]
    fn flags_other_than_the_defaults_are_written_into_the_script() {
        let wrapper = Wrapper {
            path: PathBuf::from("/bin/coldstart-run"),
            subcommand: "",
        };
        let command = [OsString::from("/app")];
        let line = |lead_kb, window_kb, no_read_around, method| {
            launcher_script(&LauncherScript {
                wrapper: &wrapper,
                plan: Path::new("/p.plan"),
                command: &command,
                threads: None,
                method,
                lead_kb,
                window_kb,
                no_read_around,
            })
            .unwrap()
            .lines()
            .nth(7)
            .unwrap()
            .to_string()
        };
        assert_eq!(
            line(0, 2048, false, Method::Readahead),
            "    exec \"$launcher\" --plan \"$plan\" -- /app \"$@\""
        );
        assert_eq!(
            line(4096, 0, true, Method::Fadvise),
            "    exec \"$launcher\" --plan \"$plan\" --method fadvise --lead-kb 4096 \
             --window-kb 0 --no-read-around -- /app \"$@\""
        );
    }

    #[test]
    fn the_argv_names_the_subcommand_only_for_coldstart_itself() {
        let big = Wrapper {
            path: PathBuf::from("/bin/coldstart"),
            subcommand: " run",
        };
        let small = Wrapper {
            path: PathBuf::from("/bin/coldstart-run"),
            subcommand: "",
        };
        let command = [OsString::from("/app")];
        let words = |w: &Wrapper, flags: &[&str]| {
            w.argv(flags, Path::new("/p.plan"), &command)
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            words(&big, &[]),
            ["/bin/coldstart", "run", "--plan", "/p.plan", "--", "/app"]
        );
        assert_eq!(
            words(&small, &[]),
            ["/bin/coldstart-run", "--plan", "/p.plan", "--", "/app"]
        );
        assert_eq!(
            words(&small, &["--no-read-around"]),
            [
                "/bin/coldstart-run",
                "--no-read-around",
                "--plan",
                "/p.plan",
                "--",
                "/app"
            ]
        );
    }
}
