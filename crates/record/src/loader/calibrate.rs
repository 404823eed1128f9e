//! What one loader probe hit costs here, measured at trace time. Each hit
//! is a trap (an entry probe also single-steps the probed instruction out
//! of line, a return probe traps at its trampoline), which stretches the
//! spans it falls in: sub-millisecond phases come out several times too
//! long. The probes fire in every process that maps the probed ld.so, this
//! one included, so coldstart times a loader call that crosses known
//! probes, `dlopen` of an object already loaded, before and after the
//! probes are enabled; the difference per hit is what analysis takes off
//! each span per hit it holds.

use super::probes::{LoaderProbes, Probe};
use std::ffi::CStr;
use std::path::Path;
use std::time::Instant;

/// Calls per timed round, and rounds: the median round is kept, so one
/// preempted round does not move the result.
const CALLS: u32 = 400;
const ROUNDS: usize = 7;

/// The object every glibc program has loaded: asking for it again with
/// RTLD_NOLOAD maps, relocates and initialises nothing.
const LOADED: &CStr = c"libc.so.6";

/// Probe hits one `dlopen(LOADED, RTLD_NOLOAD)` takes: `_dl_open` and
/// `_dl_map_object`, each entered and returning (glibc 2.36 finds the
/// object already loaded in `_dl_map_object` and leaves `dl_open_worker`
/// before `call_init`). Zero when this process would hit none of them.
pub fn hits_per_call(probes: &LoaderProbes) -> u64 {
    probes
        .points
        .iter()
        .filter(|p| {
            matches!(
                p.probe,
                Probe::Dlopen | Probe::DlopenReturn | Probe::Load | Probe::LoadReturn
            )
        })
        .count() as u64
}

/// Whether this process runs under the ld.so the probes go on (a probe
/// fires in the processes mapping its file).
pub fn runs_under(ld_so: &Path) -> bool {
    let Ok(maps) = coldstart_system::proc::maps(std::process::id() as i32) else {
        return false;
    };
    let wanted = ld_so.as_os_str().as_encoded_bytes();
    maps.lines().any(|line| line.file_path() == Some(wanted))
}

/// The median round's time of one `dlopen` of an object already loaded,
/// in ns; None when the object cannot be found.
pub fn call_ns() -> Option<f64> {
    // The first call after the probes go on also sets up the process's
    // out-of-line area for single-stepping: not a per-hit cost.
    reopen_loaded()?;
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let began = Instant::now();
            for _ in 0..CALLS {
                reopen_loaded()?;
            }
            Some(began.elapsed().as_nanos() as f64 / f64::from(CALLS))
        })
        .collect::<Option<Vec<f64>>>()?;
    rounds.sort_by(f64::total_cmp);
    Some(rounds[ROUNDS / 2])
}

/// One `dlopen(LOADED, RTLD_NOW | RTLD_NOLOAD)` and the `dlclose` that
/// gives its reference back.
fn reopen_loaded() -> Option<()> {
    coldstart_system::process::reopen_loaded(LOADED).then_some(())
}

/// The cost of one hit in ns from a call's time without and with the
/// probes and the hits it takes; None when the difference is not a cost
/// (no hits, or the probed call was not slower: the probes did not fire).
pub fn hit_ns(without_ns: f64, with_ns: f64, hits: u64) -> Option<u64> {
    if hits == 0 || with_ns <= without_ns {
        return None;
    }
    Some(((with_ns - without_ns) / hits as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_is_the_difference_per_hit() {
        assert_eq!(hit_ns(200.0, 8_200.0, 4), Some(2_000));
        assert_eq!(hit_ns(200.0, 199.0, 4), None);
        assert_eq!(hit_ns(200.0, 900.0, 0), None);
    }

    #[test]
    fn reopening_libc_works_in_a_test_process() {
        // Without probes it is a short call; what matters is that it runs.
        let ns = call_ns().expect("libc.so.6 is loaded in every glibc process");
        assert!(ns > 0.0 && ns < 1e6, "{ns}");
    }
}
