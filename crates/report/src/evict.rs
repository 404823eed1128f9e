//! `coldstart evict` as text: per file the pages resident before and after
//! (or now, with --check), totals, and who holds the pages that stayed.

use crate::table::{Style, Table, percent, thousands};
use coldstart_binary::human_bytes;
use coldstart_system::eviction::{EvictReport, FileResult};
use std::fmt::Write as _;

/// The table and totals of an eviction or a --check.
pub fn render(report: &EvictReport) -> String {
    let mut out = String::new();
    let check = report.mode == "check";
    let mut table = if check {
        Table::new(&[">size", ">resident", ">of pages", ">%", "file"])
    } else {
        Table::new(&[">size", ">before", ">after", "file"])
    };
    for f in &report.files {
        table.row(file_row(f, check));
        if let Some(runs) = &f.resident_pages {
            for chunk in runs.chunks(8) {
                let list: Vec<String> = chunk
                    .iter()
                    .map(|&run| crate::table::page_run(run))
                    .collect();
                let blanks = vec![String::new(); 4];
                table.row([blanks, vec![format!("  pages {}", list.join(" "))]].concat());
            }
        }
    }
    if !table.is_empty() {
        out.push_str(&table.render(Style::Plain, ""));
    }
    let t = &report.totals;
    let page = report.page_size;
    if check {
        let _ = writeln!(
            out,
            "{} files: {} of {} resident ({})",
            thousands(t.files as u64),
            human_bytes(t.resident_before * page),
            human_bytes(t.pages * page),
            fraction(t.resident_before, t.pages),
        );
    } else {
        let _ = writeln!(
            out,
            "{} files evicted: {} resident before, {} after",
            thousands(t.files as u64),
            human_bytes(t.resident_before * page),
            human_bytes(t.resident_after.unwrap_or(0) * page),
        );
        for f in report
            .files
            .iter()
            .filter(|f| f.resident_after.unwrap_or(0) > 0)
        {
            let _ = writeln!(
                out,
                "  {}: {} pages stay resident: {}",
                f.path,
                thousands(f.resident_after.unwrap_or(0)),
                holders(f),
            );
        }
    }
    out
}

/// The line that says the whole page cache was dropped, with the kernel's
/// Cached figure before and after when it was read.
pub fn render_dropped_all(report: &EvictReport) -> String {
    let mut text = String::from("dropped the page cache, dentries and inodes");
    if let (Some(b), Some(a)) = (report.cached_before, report.cached_after) {
        let _ = write!(
            text,
            ": cached {} before, {} after (what stays is mapped, dirty, shmem or tmpfs)",
            human_bytes(b),
            human_bytes(a)
        );
    }
    text.push('\n');
    text
}

fn file_row(f: &FileResult, check: bool) -> Vec<String> {
    if check {
        vec![
            human_bytes(f.size),
            thousands(f.resident_before),
            thousands(f.pages),
            fraction(f.resident_before, f.pages),
            f.path.clone(),
        ]
    } else {
        vec![
            human_bytes(f.size),
            thousands(f.resident_before),
            thousands(f.resident_after.unwrap_or(0)),
            f.path.clone(),
        ]
    }
}

/// Why pages of an evicted file stayed: the processes mapping it.
fn holders(f: &FileResult) -> String {
    if f.mapped_by.is_empty() {
        return "no process maps it now (pages may be locked, dirty again, or read back meanwhile)"
            .to_string();
    }
    let names: Vec<String> = f
        .mapped_by
        .iter()
        .map(|p| format!("{} ({})", p.comm, p.pid))
        .collect();
    format!("mapped by {}", names.join(", "))
}

/// `part` of `whole` as a percentage, "-" for an empty file.
pub fn fraction(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        percent(part as f64 / whole as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coldstart_system::cache::MappingProcess;
    use coldstart_system::eviction::Totals;

    fn file(path: &str, pages: u64, before: u64, after: Option<u64>) -> FileResult {
        FileResult {
            path: path.into(),
            size: pages * 4096,
            pages,
            resident_before: before,
            resident_after: after,
            dirty: None,
            mapped_by: Vec::new(),
            resident_pages: None,
            method: None,
        }
    }

    fn report(mode: &'static str, files: Vec<FileResult>, totals: Totals) -> EvictReport {
        EvictReport {
            mode,
            page_size: 4096,
            files,
            errors: Vec::new(),
            totals,
            cached_before: None,
            cached_after: None,
        }
    }

    #[test]
    fn check_lists_resident_ranges_and_totals_the_fraction() {
        let mut a = file("/a", 4, 1, None);
        a.resident_pages = Some(vec![[0, 0]]);
        let b = file("/b", 0, 0, None);
        let totals = Totals {
            files: 2,
            pages: 4,
            resident_before: 1,
            resident_after: None,
        };
        let text = render(&report("check", vec![a, b], totals));
        // 1 of 4 pages of 4 KiB: 4.0 KiB of 16.0 KiB, 25.0%.
        assert!(
            text.ends_with("2 files: 4.0 KiB of 16.0 KiB resident (25.0%)\n"),
            "{text}"
        );
        assert!(text.contains("  pages 0\n"), "{text}");
        // An empty file has no fraction.
        let b_line = text.lines().find(|l| l.ends_with("/b")).unwrap();
        assert!(b_line.contains(" - "), "{b_line}");
    }

    #[test]
    fn evict_names_who_holds_the_pages_that_stayed() {
        let mut held = file("/held", 3, 3, Some(2));
        held.mapped_by = vec![MappingProcess {
            pid: 42,
            comm: "app".into(),
        }];
        let gone = file("/gone", 1, 1, Some(0));
        let totals = Totals {
            files: 2,
            pages: 4,
            resident_before: 4,
            resident_after: Some(2),
        };
        let text = render(&report("evict", vec![held, gone], totals));
        assert!(
            text.contains("2 files evicted: 16.0 KiB resident before, 8.0 KiB after\n"),
            "{text}"
        );
        assert!(
            text.contains("  /held: 2 pages stay resident: mapped by app (42)\n"),
            "{text}"
        );
        assert!(!text.contains("/gone:"), "{text}");
    }

    #[test]
    fn dropping_all_shows_cached_before_and_after() {
        let mut all = report("all", Vec::new(), Totals::default());
        assert_eq!(
            render_dropped_all(&all),
            "dropped the page cache, dentries and inodes\n"
        );
        all.cached_before = Some(3 << 30);
        all.cached_after = Some(512 << 20);
        assert_eq!(
            render_dropped_all(&all),
            "dropped the page cache, dentries and inodes: cached 3.0 GiB before, 512.0 MiB after \
             (what stays is mapped, dirty, shmem or tmpfs)\n"
        );
    }
}
