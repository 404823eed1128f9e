//! A start through the prefetcher as text: what the prefetcher read, what
//! the program still read itself and why, per process and per file.

use crate::table::{Style, Table, heading, thousands};
use coldstart_binary::human_bytes;
use coldstart_plan::misses::{ByReason, MissAccount, MissReason};
use std::fmt::Write as _;

/// The metadata per device when it came from more than one:
/// " (device 8:1: 1.2 MiB and 300 KiB; ...)".
fn per_device(account: &MissAccount) -> String {
    if account.metadata_devices.len() < 2 {
        return String::new();
    }
    let devices: Vec<String> = account
        .metadata_devices
        .iter()
        .map(|d| {
            format!(
                "device {}: {} and {}",
                d.device,
                human_bytes(d.prefetcher.bytes),
                human_bytes(d.program.bytes)
            )
        })
        .collect();
    format!(" ({})", devices.join("; "))
}

/// The accounting, with at most `top` processes and files.
pub fn render(account: &MissAccount, top: usize) -> String {
    let mut out = String::new();
    heading(&mut out, Style::Plain, "Prefetcher and misses");
    who_read_what(&mut out, account);
    if !account.plan_known {
        let _ = writeln!(
            out,
            "the plan is unknown{}: the reasons that need it (file or page not in the plan, \
             file changed, asked, race) are counted together as not prefetched; give the plan with --plan for them",
            if account.prefetcher_tasks_outside_tree > 0 {
                " (the system-wide service served this start, and the profile does not record its plan)"
            } else {
                ""
            }
        );
    }
    outside_the_files(&mut out, account, top);
    if account.prefetcher_tasks == 0 {
        out.push_str(
            "no prefetcher task in this run: it was not started through coldstart run or coldstart-run, \
             nor served by the system-wide service, so every read counts as the program's\n",
        );
    }
    push_table(&mut out, reasons(account));
    push_table(&mut out, processes(account, top));
    push_table(&mut out, files(account, top));
    out
}

/// A table after a blank line, unless it has no rows.
fn push_table(out: &mut String, table: Table) {
    if !table.is_empty() {
        out.push('\n');
        out.push_str(&table.render(Style::Plain, ""));
    }
}

/// The plan's size, what the prefetcher read, what the program read itself.
fn who_read_what(out: &mut String, account: &MissAccount) {
    let plan = if account.plan_known {
        format!("plan {}", human_bytes(account.plan_bytes))
    } else {
        "plan unknown".to_string()
    };
    let outside = match account.prefetcher_tasks_outside_tree {
        0 => String::new(),
        n if n == account.prefetcher_tasks => {
            ", the system-wide service's, outside the traced tree".to_string()
        }
        n => format!(", {n} of them the system-wide service's, outside the traced tree"),
    };
    let _ = writeln!(
        out,
        "{plan}; the prefetcher ({} tasks{outside}) read {}; the program read {} itself ({} pages, {} of them demanded, the rest read around them){}",
        account.prefetcher_tasks,
        human_bytes(account.prefetcher.bytes),
        human_bytes(account.program.bytes),
        thousands(account.program.pages),
        thousands(account.program.demanded_pages),
        account
            .program_over_plan()
            .map(|r| format!(", {:.1}% of the plan", r * 100.0))
            .unwrap_or_default(),
    );
}

/// Reads of no file of the plan: filesystem metadata, the lookups that
/// waited for it, and other in-kernel files.
fn outside_the_files(out: &mut String, account: &MissAccount, top: usize) {
    if account.prefetcher_metadata.pages + account.program_metadata.pages > 0 {
        let _ = writeln!(
            out,
            "filesystem metadata (inode tables, directories, extent blocks), not counted above: the prefetcher read {}, the program {}{}",
            human_bytes(account.prefetcher_metadata.bytes),
            human_bytes(account.program_metadata.bytes),
            per_device(account)
        );
    }
    if account.prefetcher_inode_loads + account.program_inode_loads > 0 {
        let _ = writeln!(
            out,
            "lookups that waited for an inode table read: the prefetcher {}{}, the program {}{}",
            thousands(account.prefetcher_inode_loads),
            if account.prefetcher_tasks_outside_tree > 0 {
                " (the trace keeps the traced tree's only, not the service's)"
            } else {
                ""
            },
            thousands(account.program_inode_loads),
            inode_paths(account, top)
        );
    }
    let other_prefetcher = account.prefetcher_in_kernel.pages - account.prefetcher_metadata.pages;
    let other_program = account.program_in_kernel.pages - account.program_metadata.pages;
    if other_prefetcher + other_program > 0 {
        let _ = writeln!(
            out,
            "other in-kernel files (shared memory, memfd), not counted above: the prefetcher brought in {}, the program {}",
            human_bytes(other_prefetcher * account.page_size),
            human_bytes(other_program * account.page_size)
        );
    }
}

/// The paths whose lookups by the program waited for an inode table read,
/// at most `top`: " (/a, /b and 3 more)".
fn inode_paths(account: &MissAccount, top: usize) -> String {
    if account.program_inode_paths.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = account
        .program_inode_paths
        .iter()
        .take(top)
        .map(String::as_str)
        .collect();
    let more = account.program_inode_paths.len() - shown.len();
    format!(
        " ({}{})",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// What the program read itself, by why.
fn reasons(account: &MissAccount) -> Table {
    let mut reasons = Table::new(&["why the program read it", ">read", ">pages", ">demanded"]);
    for (reason, count) in &account.by_reason.0 {
        reasons.row(vec![
            reason.describe().to_string(),
            human_bytes(count.bytes),
            thousands(count.pages),
            thousands(count.demanded_pages),
        ]);
    }
    reasons
}

/// The `top` processes that read most themselves.
fn processes(account: &MissAccount, top: usize) -> Table {
    let mut processes = Table::new(&[">pid", "process", ">read", "by reason"]);
    for p in account.processes.iter().take(top) {
        processes.row(vec![
            p.pid.to_string(),
            p.comm.clone().unwrap_or_else(|| "?".to_string()),
            human_bytes(p.read.bytes),
            reason_list(&p.by_reason),
        ]);
    }
    processes
}

/// The `top` files read by the prefetcher or the program: planned,
/// prefetched, and what the program still read and why.
fn files(account: &MissAccount, top: usize) -> Table {
    let mut files = Table::new(&[
        ">planned",
        ">prefetched",
        ">program read",
        ">demanded",
        "by reason",
        "file",
    ]);
    for f in account
        .files
        .iter()
        .filter(|f| f.program_read.pages > 0 || f.prefetched.pages > 0)
        .take(top)
    {
        files.row(vec![
            if !account.plan_known {
                "?".to_string()
            } else if f.in_plan {
                human_bytes(f.planned_pages * account.page_size)
            } else {
                "-".to_string()
            },
            human_bytes(f.prefetched.bytes),
            human_bytes(f.program_read.bytes),
            thousands(f.program_read.demanded_pages),
            reason_list(&f.by_reason),
            f.path.clone(),
        ]);
    }
    files
}

/// "page-not-in-plan 1.2 MiB, race 40 KiB".
fn reason_list(reasons: &ByReason) -> String {
    let parts: Vec<String> = MissReason::ALL
        .iter()
        .map(|&r| (r, reasons.get(r)))
        .filter(|(_, c)| c.pages > 0)
        .map(|(r, c)| format!("{} {}", r.as_str(), human_bytes(c.bytes)))
        .collect();
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(", ")
    }
}

/// The floor prediction in one paragraph.
pub fn render_floor(floor: &coldstart_plan::floor::Floor) -> String {
    let ms = |ns: i64| ns as f64 / 1e6;
    let mut out = String::new();
    heading(&mut out, Style::Plain, "Floor");
    let _ = writeln!(
        out,
        "a perfect prefetch of the plan on a device streaming {:.0} MB/s at {:.0} µs a request: {:.1} ms \
         (this start's {:.1} ms + {:.1} ms it would wait for data); the device reads the whole plan ({} extents) \
         by {:.1} ms; the start used {} of them; read in the plan's own order it would wait {:.1} ms",
        floor.device.bandwidth_bytes_s / 1e6,
        floor.device.request_s * 1e6,
        ms(floor.mapped.floor_ns),
        ms(floor.reference_ns),
        ms(floor.mapped.held_back_ns),
        thousands(floor.extents as u64),
        ms(floor.plan_read_ns),
        thousands(floor.mapped.extents_used as u64),
        ms(floor.mapped.held_back_plan_order_ns),
    );
    let _ = writeln!(
        out,
        "counting only the pages the start demanded (faults, reads; fault-around maps cached pages before \
         their use, so mappings counted as uses overstate the wait): {} extents used, {:.1} ms \
         (+{:.1} ms), in the plan's own order +{:.1} ms; the truth lies between the two",
        thousands(floor.demanded.extents_used as u64),
        ms(floor.demanded.floor_ns),
        ms(floor.demanded.held_back_ns),
        ms(floor.demanded.held_back_plan_order_ns),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_plan::misses::{Count, DeviceMetadata};

    fn pages(n: u64) -> Count {
        Count {
            pages: n,
            bytes: n * 4096,
            demanded_pages: 0,
        }
    }

    fn account(devices: Vec<DeviceMetadata>) -> MissAccount {
        let sum =
            |side: fn(&DeviceMetadata) -> Count| pages(devices.iter().map(|d| side(d).pages).sum());
        MissAccount {
            run: 1,
            page_size: 4096,
            read_ahead_kb: Some(128),
            plan_known: true,
            plan_bytes: 0,
            prefetcher_tasks: 1,
            prefetcher_tasks_outside_tree: 0,
            prefetcher: pages(0),
            program: pages(0),
            prefetcher_in_kernel: sum(|d| d.prefetcher),
            program_in_kernel: sum(|d| d.program),
            prefetcher_metadata: sum(|d| d.prefetcher),
            program_metadata: sum(|d| d.program),
            metadata_devices: devices,
            prefetcher_inode_loads: 0,
            program_inode_loads: 0,
            program_inode_paths: Vec::new(),
            by_reason: ByReason::default(),
            processes: Vec::new(),
            files: Vec::new(),
        }
    }

    #[test]
    fn a_start_the_service_served_without_its_plan_says_so() {
        use coldstart_plan::misses::{FileMisses, MissReason};
        let mut served = account(Vec::new());
        served.plan_known = false;
        served.prefetcher_tasks = 3;
        served.prefetcher_tasks_outside_tree = 3;
        served.prefetcher = pages(256);
        served.program = pages(3);
        served.by_reason = ByReason(vec![
            (MissReason::BeforePrefetcher, pages(1)),
            (MissReason::NotPrefetched, pages(2)),
        ]);
        served.files = vec![FileMisses {
            path: "/lib/a.so".into(),
            planned_pages: 0,
            in_plan: false,
            prefetched: pages(256),
            program_read: pages(3),
            by_reason: served.by_reason.clone(),
        }];
        let text = render(&served, 10);
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("plan "))
            .expect("the first line");
        assert_eq!(
            lines[at],
            "plan unknown; the prefetcher (3 tasks, the system-wide service's, outside the traced tree) \
             read 1.0 MiB; the program read 12.0 KiB itself (3 pages, 0 of them demanded, the rest read around them)"
        );
        assert_eq!(
            lines[at + 1],
            "the plan is unknown (the system-wide service served this start, and the profile does not \
             record its plan): the reasons that need it (file or page not in the plan, file changed, asked, race) are \
             counted together as not prefetched; give the plan with --plan for them"
        );
        assert!(text.contains("not prefetched (plan unknown)"), "{text}");
        let row = lines
            .iter()
            .find(|l| l.ends_with("/lib/a.so"))
            .expect("the file's row");
        assert!(row.trim_start().starts_with('?'), "{row}");

        // Some of the tasks in the tree, some outside; the service's
        // lookups are not in the trace.
        served.prefetcher_tasks_outside_tree = 2;
        served.prefetcher_inode_loads = 1;
        let text = render(&served, 10);
        assert!(
            text.contains(
                "(3 tasks, 2 of them the system-wide service's, outside the traced tree)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "the prefetcher 1 (the trace keeps the traced tree's only, not the service's), the program 0"
            ),
            "{text}"
        );
    }

    fn metadata_line(account: &MissAccount) -> String {
        render(account, 10)
            .lines()
            .find(|l| l.starts_with("filesystem metadata"))
            .unwrap()
            .to_string()
    }

    #[test]
    fn metadata_from_two_devices_is_named_per_device() {
        let two = account(vec![
            DeviceMetadata {
                device: "254:1".into(),
                prefetcher: pages(256),
                program: pages(64),
            },
            DeviceMetadata {
                device: "7:0".into(),
                prefetcher: pages(0),
                program: pages(2),
            },
        ]);
        assert_eq!(
            metadata_line(&two),
            "filesystem metadata (inode tables, directories, extent blocks), not counted above: \
             the prefetcher read 1.0 MiB, the program 264.0 KiB \
             (device 254:1: 1.0 MiB and 256.0 KiB; device 7:0: 0 B and 8.0 KiB)"
        );
        let one = account(two.metadata_devices[..1].to_vec());
        assert!(metadata_line(&one).ends_with("the program 256.0 KiB"));
    }

    #[test]
    fn inode_loads_are_counted_with_the_programs_paths() {
        let mut loads = account(Vec::new());
        assert!(
            !render(&loads, 2).contains("inode table read"),
            "none, no line"
        );
        loads.prefetcher_inode_loads = 21;
        loads.program_inode_loads = 4;
        loads.program_inode_paths = vec!["/lib32".into(), "/etc/selinux".into(), "/tmp".into()];
        let text = render(&loads, 2);
        let line = text
            .lines()
            .find(|l| l.starts_with("lookups that waited"))
            .unwrap();
        assert_eq!(
            line,
            "lookups that waited for an inode table read: the prefetcher 21, the program 4 \
             (/lib32, /etc/selinux and 1 more)"
        );
    }
}
