//! What a plan must be before the service follows it. The service reads
//! files as root on behalf of whoever starts a program, from plans on
//! disk: a plan that is corrupt, absurdly large or names what no start
//! reads from disk is refused with the reason, never half followed.
//! (The replay itself then opens each file as the starting user, refuses
//! anything but a regular file and any path through a symbolic link: see
//! `coldstart_prefetch::replay`.)

use coldstart_prefetch::Plan;
use std::path::{Component, Path};

/// The most extents a plan may have: a cold start of Chromium plans about
/// 12,000; a hundred thousand leaves room and bounds the work.
pub const MAX_EXTENTS: usize = 100_000;

/// The most files a plan may name (Firefox's start opens about 250).
pub const MAX_FILES: usize = 20_000;

/// The most lookups a plan may list.
pub const MAX_LOOKUPS: usize = 100_000;

/// Plans larger than this are refused unless the service is told more:
/// the largest start measured here reads about 200 MiB.
pub const DEFAULT_MAX_PLAN_BYTES: u64 = 1 << 30;

/// Directories whose files no start reads from a disk.
const NOT_FROM_DISK: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Checks `plan` against the limits; the first problem found, in a
/// sentence, when it is refused. Lookups of names under /proc, /sys or
/// /dev are left out of it, not refused: a start looks such names up
/// (readlink /proc/self/exe) and `coldstart plan` may list them, while the
/// replay would only refuse them one by one. Returns how many were left out.
pub fn admit(plan: &mut Plan, max_bytes: u64) -> Result<usize, String> {
    if !(4096..=65536).contains(&plan.page_size) || !plan.page_size.is_power_of_two() {
        return Err(format!(
            "page size {} is not one Linux uses",
            plan.page_size
        ));
    }
    if plan.extents.len() > MAX_EXTENTS {
        return Err(format!(
            "{} extents, more than the {MAX_EXTENTS} a start can need",
            plan.extents.len()
        ));
    }
    if plan.files.len() > MAX_FILES {
        return Err(format!(
            "{} files, more than the {MAX_FILES} a start can need",
            plan.files.len()
        ));
    }
    if plan.lookups.len() > MAX_LOOKUPS {
        return Err(format!(
            "{} lookups, more than the {MAX_LOOKUPS} a start can need",
            plan.lookups.len()
        ));
    }
    for file in &plan.files {
        check_path(&file.path)?;
    }
    let before = plan.lookups.len();
    plan.lookups.retain(|lookup| {
        !NOT_FROM_DISK
            .iter()
            .any(|top| Path::new(&lookup.path).starts_with(top))
    });
    let left_out = before - plan.lookups.len();
    // A name looked up may go through `..` (a script's `$0/../lib`): the
    // lookup walks it as the start did.
    if let Some(lookup) = plan
        .lookups
        .iter()
        .find(|l| !Path::new(&l.path).is_absolute())
    {
        return Err(format!("lookup {:?} is not an absolute path", lookup.path));
    }
    let mut bytes: u64 = 0;
    for extent in &plan.extents {
        let file = plan
            .files
            .get(extent.file)
            .ok_or_else(|| format!("an extent names file {}, which it lacks", extent.file))?;
        let end = extent
            .page
            .checked_add(extent.pages)
            .and_then(|end| end.checked_mul(plan.page_size))
            .ok_or_else(|| format!("an extent of {} overflows", file.path))?;
        if extent.pages == 0 || end > file.size.next_multiple_of(plan.page_size) {
            return Err(format!(
                "an extent of {} (pages {}+{}) lies outside its {} bytes",
                file.path, extent.page, extent.pages, file.size
            ));
        }
        bytes = bytes.saturating_add(extent.pages * plan.page_size);
    }
    if bytes > max_bytes {
        return Err(format!(
            "{} MiB, more than the {} MiB cap",
            bytes >> 20,
            max_bytes >> 20
        ));
    }
    Ok(left_out)
}

/// A path the plan may name: absolute, plain (no `.` or `..`), not under
/// /proc, /sys or /dev.
pub(crate) fn check_path(path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(format!("{path:?} is not an absolute path"));
    }
    if p.components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(format!("{path:?} goes through . or .."));
    }
    if let Some(top) = NOT_FROM_DISK.iter().find(|top| p.starts_with(top)) {
        return Err(format!(
            "{path:?} is under {top}, not a file a start reads from disk"
        ));
    }
    Ok(())
}

/// Plans made by hand for the tests of this crate.
#[cfg(test)]
pub(crate) mod testing {
    use coldstart_prefetch::{Extent, Plan, PlanFile, PlanSource};

    /// A plan of 4 KiB pages naming `files` (path, size) with `extents`
    /// (file, first page, pages).
    pub(crate) fn plan(files: &[(&str, u64)], extents: &[(usize, u64, u64)]) -> Plan {
        Plan {
            page_size: 4096,
            source: PlanSource {
                profile: "p.db".into(),
                runs: vec![1],
                min_runs: 1,
                merge_gap_pages: 0,
                max_extent_pages: 0,
                max_bytes: None,
                pages_from: "demand".into(),
            },
            files: files
                .iter()
                .map(|&(path, size)| PlanFile {
                    path: path.into(),
                    size,
                    mtime_ns: None,
                    build_id: None,
                })
                .collect(),
            extents: extents
                .iter()
                .map(|&(file, page, pages)| Extent {
                    file,
                    page,
                    pages,
                    need_ns: 0,
                })
                .collect(),
            lookups: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::plan;
    use super::*;
    use coldstart_prefetch::{Extent, Lookup};

    #[test]
    fn a_sound_plan_is_admitted_and_its_size_capped() {
        let mut p = plan(&[("/usr/lib/libx.so", 10_000)], &[(0, 0, 2), (0, 2, 1)]);
        assert_eq!(admit(&mut p, 1 << 20), Ok(0));
        // The last page counts whole: 3 pages of a 10,000-byte file.
        let err = admit(&mut p, 3 * 4096 - 1).unwrap_err();
        assert!(err.contains("cap"), "{err}");
    }

    #[test]
    fn hostile_plans_are_refused_with_the_reason() {
        let cases: Vec<(Plan, &str)> = vec![
            (
                plan(&[("/proc/self/mem", 1 << 40)], &[(0, 0, 1)]),
                "under /proc",
            ),
            (plan(&[("/dev/vda", 1 << 30)], &[]), "under /dev"),
            (plan(&[("/usr/lib/../../etc/shadow", 10)], &[]), ".."),
            (plan(&[("lib/x.so", 10)], &[]), "absolute"),
            (plan(&[("/x", 4096)], &[(0, 1, 1)]), "outside"),
            (plan(&[("/x", 4096)], &[(0, u64::MAX - 1, 5)]), "overflows"),
            (plan(&[("/x", 4096)], &[(3, 0, 1)]), "names file 3"),
            (plan(&[("/x", 4096)], &[(0, 0, 0)]), "outside"),
        ];
        for (mut p, expected) in cases {
            let err = admit(&mut p, u64::MAX).unwrap_err();
            assert!(err.contains(expected), "{err} (expected {expected})");
        }
        let mut many = plan(&[("/x", 1 << 40)], &[]);
        many.extents = (0..=MAX_EXTENTS as u64)
            .map(|page| Extent {
                file: 0,
                page,
                pages: 1,
                need_ns: 0,
            })
            .collect();
        assert!(admit(&mut many, u64::MAX).unwrap_err().contains("extents"));
        let lookup = |path: &str| Lookup {
            path: path.into(),
            ino: 1,
            need_ns: 0,
        };
        // Lookups of /proc or /sys names are left out, the rest checked.
        let mut lookups = plan(&[], &[]);
        lookups.lookups = vec![
            lookup("/proc/self/exe"),
            lookup("/usr/lib"),
            lookup("/sys/kernel"),
        ];
        assert_eq!(admit(&mut lookups, u64::MAX), Ok(2));
        assert_eq!(lookups.lookups, vec![lookup("/usr/lib")]);
        lookups.lookups.push(lookup("usr/../x"));
        assert!(
            admit(&mut lookups, u64::MAX)
                .unwrap_err()
                .contains("absolute")
        );
    }
}
