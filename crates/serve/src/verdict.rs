//! Whether a plan helps, from the starts the service saw: served starts
//! against held-out ones, both cold. A start that found most of its plan's
//! pages cached says nothing of the plan (served or not, it reads little),
//! so only starts whose sampled plan pages were mostly not resident at the
//! exec count. Times are compared mean to mean with the 95% interval of
//! their ratio (Fieller; `coldstart_bench::stats`), as `coldstart bench`
//! compares variants.
//!
//! A plan is switched off when its served starts are not faster:
//! - as soon as the interval lies wholly at or above 1 (served starts are
//!   slower, beyond noise), with at least [`MIN_EACH`] cold starts a side;
//! - or when, after [`ENOUGH_HELD_OUT`] cold held-out starts, the interval
//!   still reaches 1 (no gain the measurements can show).
//!
//! Iorap stored every launch's timing and never used it; this is where
//! coldstart uses it.

use crate::state::{EndedBy, Outcome, StartRecord};
use coldstart_bench::stats::ratio_of_means;
use serde::Serialize;

/// A start counts as cold when less than this share of its plan's sampled
/// pages was resident at the exec. Starts ended by the cap or by the
/// service stopping have no end to compare and do not count either.
pub const COLD_BELOW: f64 = 0.5;

/// Cold starts each side needs before a verdict can switch a plan off.
pub const MIN_EACH: usize = 5;

/// Cold held-out starts after which a gain that does not show is no gain.
pub const ENOUGH_HELD_OUT: usize = 20;

/// The measured effect of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gain {
    /// Cold served starts compared.
    pub served: usize,
    /// Cold held-out starts compared.
    pub held_out: usize,
    /// Mean time to the end of a served start over a held-out one.
    pub ratio: Option<f64>,
    /// Its 95% interval, when both sides have two starts or more.
    pub ci95: Option<(f64, f64)>,
}

/// What the starts say of the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Not enough cold starts to say.
    Undecided,
    /// Served starts are faster, or may be.
    Keep,
    /// Served starts are not faster: the sentence says how it is known.
    SwitchOff(String),
}

/// The gain the cold starts among `starts` show.
pub fn gain(starts: &[StartRecord]) -> Gain {
    let times = |outcome: Outcome| -> Vec<f64> {
        starts
            .iter()
            .filter(|s| {
                s.outcome == outcome
                    && s.resident_share < COLD_BELOW
                    && matches!(s.ended_by, EndedBy::Quiet | EndedBy::Exited)
            })
            .map(|s| s.end_ms)
            .collect()
    };
    let served = times(Outcome::Served);
    let held_out = times(Outcome::HeldOut);
    let ratio = ratio_of_means(&served, &held_out);
    Gain {
        served: served.len(),
        held_out: held_out.len(),
        ratio: ratio.as_ref().map(|r| r.ratio),
        ci95: ratio.and_then(|r| r.ci95),
    }
}

/// The verdict on a plan from its starts.
pub fn verdict(gain: &Gain) -> Verdict {
    if gain.served < MIN_EACH || gain.held_out < MIN_EACH {
        return Verdict::Undecided;
    }
    let (Some(ratio), Some((low, high))) = (gain.ratio, gain.ci95) else {
        return Verdict::Undecided;
    };
    let measured = format!(
        "served cold starts took {ratio:.2}x the time of held-out ones [{low:.2}, {high:.2}] \
         over {} served and {} held-out starts",
        gain.served, gain.held_out
    );
    if low >= 1.0 {
        Verdict::SwitchOff(format!("not faster: {measured}"))
    } else if high >= 1.0 && gain.held_out >= ENOUGH_HELD_OUT {
        Verdict::SwitchOff(format!("no gain shows: {measured}"))
    } else {
        Verdict::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(outcome: Outcome, end_ms: f64, resident_share: f64) -> StartRecord {
        StartRecord {
            at_unix_ms: 0,
            pid: 1,
            uid: Some(0),
            outcome,
            ended_by: EndedBy::Quiet,
            end_ms,
            resident_share,
            program_read_bytes: 0,
            prefetch_bytes: 0,
            first_request_us: None,
            skipped_files: Vec::new(),
            traced: false,
            decided_at_exec: false,
        }
    }

    fn starts(served: &[f64], held: &[f64]) -> Vec<StartRecord> {
        served
            .iter()
            .map(|&t| start(Outcome::Served, t, 0.0))
            .chain(held.iter().map(|&t| start(Outcome::HeldOut, t, 0.0)))
            .collect()
    }

    #[test]
    fn a_plan_that_helps_is_kept_and_one_that_slows_is_switched_off() {
        let helps = starts(
            &[500.0, 510.0, 490.0, 505.0, 495.0],
            &[900.0, 910.0, 890.0, 905.0, 895.0],
        );
        let g = gain(&helps);
        assert_eq!((g.served, g.held_out), (5, 5));
        assert!((g.ratio.unwrap() - 0.5555).abs() < 1e-3, "{g:?}");
        assert_eq!(verdict(&g), Verdict::Keep);

        let slows = starts(
            &[1000.0, 1010.0, 990.0, 1005.0, 995.0],
            &[900.0, 910.0, 890.0, 905.0, 895.0],
        );
        match verdict(&gain(&slows)) {
            Verdict::SwitchOff(why) => assert!(why.starts_with("not faster"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn warm_starts_and_too_few_starts_decide_nothing() {
        let mut warm = starts(&[1000.0; 5], &[100.0; 5]);
        for s in &mut warm {
            s.resident_share = 0.9;
        }
        assert_eq!(gain(&warm).served, 0);
        assert_eq!(verdict(&gain(&warm)), Verdict::Undecided);
        let few = starts(&[1000.0; 4], &[100.0; 9]);
        assert_eq!(verdict(&gain(&few)), Verdict::Undecided);
    }

    #[test]
    fn a_gain_that_never_shows_switches_the_plan_off_after_enough_held_out_starts() {
        let noisy: Vec<f64> = (0..ENOUGH_HELD_OUT)
            .map(|i| 800.0 + (i % 5) as f64 * 50.0)
            .collect();
        let same = starts(&noisy, &noisy);
        match verdict(&gain(&same)) {
            Verdict::SwitchOff(why) => assert!(why.starts_with("no gain shows"), "{why}"),
            other => panic!("{other:?}"),
        }
        let fewer = starts(&noisy, &noisy[..ENOUGH_HELD_OUT - 1]);
        assert_eq!(verdict(&gain(&fewer)), Verdict::Keep);
    }
}
