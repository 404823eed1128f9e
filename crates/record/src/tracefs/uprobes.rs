//! Uprobe events for one traced run. Uprobes are defined globally (in
//! `uprobe_events`), so each coldstart puts its own in a group named after
//! its pid, enables them only in its private instance, and removes them
//! when this value drops, after the instance is gone (an enabled probe
//! cannot be removed). Groups left by a coldstart that was killed are
//! removed by the next run once their owner is gone.

use super::instance::TraceError;
use coldstart_system::proc;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const GROUP_PREFIX: &str = "coldstart_";

/// This process's uprobe group, optionally tagged (letters, digits and
/// underscores only, as tracefs requires).
pub fn group_name(tag: &str) -> String {
    if tag.is_empty() {
        format!("{GROUP_PREFIX}{}", std::process::id())
    } else {
        format!("{GROUP_PREFIX}{}_{tag}", std::process::id())
    }
}

/// Uprobes this process defined; removed on drop.
pub struct Uprobes {
    root: PathBuf,
    group: String,
    names: Vec<&'static str>,
}

impl Uprobes {
    /// Defines each `(name, definition line)` under `root`. On a failure
    /// the ones already defined are removed and the error says which line
    /// the kernel refused and why (from tracefs's error_log when it says).
    pub fn define(
        root: &Path,
        group: &str,
        probes: &[(&'static str, String)],
    ) -> Result<Uprobes, TraceError> {
        let mut defined = Uprobes {
            root: root.to_path_buf(),
            group: group.to_string(),
            names: Vec::with_capacity(probes.len()),
        };
        let events = root.join("uprobe_events");
        for (name, line) in probes {
            if let Err(source) = append(&events, line) {
                let detail = last_error_logged(root);
                return Err(TraceError::Uprobe {
                    definition: line.clone(),
                    source,
                    detail,
                });
            }
            defined.names.push(name);
        }
        Ok(defined)
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    /// Names of the probes defined, as "group/name".
    pub fn events(&self) -> Vec<String> {
        self.names
            .iter()
            .map(|name| format!("{}/{name}", self.group))
            .collect()
    }
}

impl Drop for Uprobes {
    fn drop(&mut self) {
        let events = self.root.join("uprobe_events");
        let mut left = Vec::new();
        for name in &self.names {
            let line = format!("-:{}/{name}", self.group);
            // The instance that enabled it may still be on its way out.
            let removed = (0..50).any(|_| {
                append(&events, &line).is_ok() || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    false
                }
            });
            if !removed {
                left.push(line);
            }
        }
        if !left.is_empty() {
            eprintln!(
                "coldstart: could not remove uprobes {}; remove them with: echo '{}' >> {}",
                left.join(" "),
                left.join("\n"),
                events.display()
            );
        }
    }
}

/// Removes uprobes whose coldstart group belongs to a process that no
/// longer exists. Returns the events removed, as "group/name".
pub fn remove_stale_uprobes(root: &Path) -> Vec<String> {
    let events = root.join("uprobe_events");
    let Ok(text) = std::fs::read_to_string(&events) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for event in stale_events(&text, proc::process_exists) {
        if append(&events, &format!("-:{event}")).is_ok() {
            removed.push(event);
        }
    }
    removed
}

/// The "group/name" of every coldstart uprobe in `uprobe_events` text
/// whose owner, per `alive`, is gone.
fn stale_events(text: &str, alive: impl Fn(i32) -> bool) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            // "p:coldstart_123/load /usr/lib/...:0x7eb0 path=..."
            let event = line.split_whitespace().next()?.split_once(':')?.1;
            let owner = event
                .strip_prefix(GROUP_PREFIX)?
                .split(['/', '_'])
                .next()?
                .parse::<i32>()
                .ok()?;
            (!alive(owner)).then(|| event.to_string())
        })
        .collect()
}

fn append(path: &Path, line: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().append(true).open(path)?;
    file.write_all(line.as_bytes())
}

/// The newest entry of tracefs's error_log, which says why a definition
/// was refused (the write itself only returns EINVAL).
fn last_error_logged(root: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(root.join("error_log")) else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.starts_with('['))
        .unwrap_or(lines.len());
    lines[start..]
        .iter()
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_groups_are_those_of_dead_owners() {
        let text = "p:coldstart_100/load /lib/ld.so:0x7eb0 path=+0(%si):string\n\
                    r:coldstart_100/load_ret /lib/ld.so:0x7eb0\n\
                    p:coldstart_200_bench/load /lib/ld.so:0x7eb0\n\
                    p:other_100/x /bin/true:0x10\n";
        let stale = stale_events(text, |pid| pid == 200);
        assert_eq!(stale, vec!["coldstart_100/load", "coldstart_100/load_ret"]);
        let stale = stale_events(text, |pid| pid == 100);
        assert_eq!(stale, vec!["coldstart_200_bench/load"]);
    }

    #[test]
    fn group_names_are_tracefs_identifiers() {
        let name = group_name("x1");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        assert!(name.starts_with("coldstart_"));
    }
}
