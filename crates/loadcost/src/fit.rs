//! The cost per unit of a factor: the least-squares slope of the level
//! medians against the level, with a 95% interval from a bootstrap that
//! resamples each level's runs. Medians keep a stray slow run (a shared
//! machine has them) from tilting the line; the bootstrap gives an interval
//! without assuming the runs are normal.

use crate::run::stream;
use coldstart_bench::stats::median;
use serde::Serialize;

/// Bootstrap resamples behind every interval.
const RESAMPLES: usize = 2000;

/// One level's runs, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelSummary {
    pub level: u64,
    pub runs: usize,
    pub median_ns: f64,
    /// 95% bootstrap interval of the median.
    pub median_ci_ns: (f64, f64),
}

/// A straight line through the level medians.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// Nanoseconds per unit of the factor.
    pub slope_ns: f64,
    /// 95% bootstrap interval of the slope.
    pub slope_ci_ns: (f64, f64),
    /// The line's value at level 0, in nanoseconds.
    pub intercept_ns: f64,
    /// How much of the medians' variation the line explains (1 = all).
    pub r_squared: f64,
}

impl Fit {
    /// Whether the interval excludes zero: the factor costs something.
    pub fn is_significant(&self) -> bool {
        self.slope_ci_ns.0 > 0.0 || self.slope_ci_ns.1 < 0.0
    }

    /// Whether two fits' intervals overlap: they may be the same cost.
    pub fn overlaps(&self, other: &Fit) -> bool {
        self.slope_ci_ns.0 <= other.slope_ci_ns.1 && other.slope_ci_ns.0 <= self.slope_ci_ns.1
    }
}

/// Summarises each level and fits the line. None with fewer than two
/// levels holding runs, or with all levels equal.
pub fn fit(levels: &[(u64, &[f64])], seed: u64) -> Option<(Vec<LevelSummary>, Fit)> {
    let levels: Vec<(u64, &[f64])> = levels
        .iter()
        .copied()
        .filter(|(_, runs)| !runs.is_empty())
        .collect();
    if levels.len() < 2 || levels.iter().all(|(level, _)| *level == levels[0].0) {
        return None;
    }
    let xs: Vec<f64> = levels.iter().map(|(level, _)| *level as f64).collect();
    let medians: Vec<f64> = levels.iter().map(|(_, runs)| median(runs)).collect();
    let (slope, intercept) = least_squares(&xs, &medians);
    let r_squared = r_squared(&xs, &medians, slope, intercept);

    let mut draw = stream(seed);
    let mut slopes = Vec::with_capacity(RESAMPLES);
    let mut resampled_medians: Vec<Vec<f64>> = vec![Vec::with_capacity(RESAMPLES); levels.len()];
    let mut scratch = Vec::new();
    let mut row = vec![0.0; levels.len()];
    for _ in 0..RESAMPLES {
        for (index, (_, runs)) in levels.iter().enumerate() {
            scratch.clear();
            scratch.extend((0..runs.len()).map(|_| runs[draw(runs.len() as u64) as usize]));
            row[index] = median(&scratch);
            resampled_medians[index].push(row[index]);
        }
        slopes.push(least_squares(&xs, &row).0);
    }
    let summaries = levels
        .iter()
        .zip(&medians)
        .zip(&mut resampled_medians)
        .map(|(((level, runs), &median_ns), resampled)| LevelSummary {
            level: *level,
            runs: runs.len(),
            median_ns,
            median_ci_ns: percentile_interval(resampled),
        })
        .collect();
    Some((
        summaries,
        Fit {
            slope_ns: slope,
            slope_ci_ns: percentile_interval(&mut slopes),
            intercept_ns: intercept,
            r_squared,
        },
    ))
}

/// Ordinary least squares: (slope, intercept).
fn least_squares(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = ys.iter().sum::<f64>() / n;
    let sxy: f64 = xs
        .iter()
        .zip(ys)
        .map(|(x, y)| (x - mean_x) * (y - mean_y))
        .sum();
    let sxx: f64 = xs.iter().map(|x| (x - mean_x).powi(2)).sum();
    let slope = sxy / sxx;
    (slope, mean_y - slope * mean_x)
}

fn r_squared(xs: &[f64], ys: &[f64], slope: f64, intercept: f64) -> f64 {
    let mean_y = ys.iter().sum::<f64>() / ys.len() as f64;
    let total: f64 = ys.iter().map(|y| (y - mean_y).powi(2)).sum();
    if total == 0.0 {
        return 1.0;
    }
    let residual: f64 = xs
        .iter()
        .zip(ys)
        .map(|(x, y)| (y - (slope * x + intercept)).powi(2))
        .sum();
    1.0 - residual / total
}

/// The 2.5th and 97.5th percentiles (nearest rank).
fn percentile_interval(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let rank =
        |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    (rank(0.025), rank(0.975))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_known_line() {
        let xs = [0.0, 1.0, 2.0, 3.0];
        let ys: Vec<f64> = xs.iter().map(|x| 5.0 + 2.5 * x).collect();
        let (slope, intercept) = least_squares(&xs, &ys);
        assert!((slope - 2.5).abs() < 1e-12 && (intercept - 5.0).abs() < 1e-12);
        assert!((r_squared(&xs, &ys, slope, intercept) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_fit_finds_the_slope_under_noise_and_its_interval_holds_it() {
        // y = 1000 + 3x ns, with a fixed spread of ±40 ns and one wild run
        // per level that the medians must ignore.
        let offsets = [
            -40.0, -20.0, 0.0, 20.0, 40.0, -30.0, 30.0, 10.0, -10.0, 5000.0,
        ];
        let runs: Vec<(u64, Vec<f64>)> = [0u64, 100, 200, 300, 400]
            .iter()
            .map(|&level| {
                let base = 1000.0 + 3.0 * level as f64;
                (level, offsets.iter().map(|o| base + o).collect())
            })
            .collect();
        let levels: Vec<(u64, &[f64])> = runs.iter().map(|(l, r)| (*l, r.as_slice())).collect();
        let (summaries, fit) = fit(&levels, 7).unwrap();
        assert!((fit.slope_ns - 3.0).abs() < 1e-9, "{fit:?}");
        assert!(
            fit.slope_ci_ns.0 <= 3.0 && 3.0 <= fit.slope_ci_ns.1,
            "{fit:?}"
        );
        assert!(fit.slope_ci_ns.1 - fit.slope_ci_ns.0 < 1.0, "{fit:?}");
        assert!(fit.is_significant());
        assert_eq!(summaries.len(), 5);
        assert_eq!(summaries[2].median_ns, 1000.0 + 600.0 + 5.0);
        assert_eq!(summaries[2].runs, 10);
    }

    #[test]
    fn a_flat_factor_is_not_significant() {
        let flat = [100.0, 130.0, 90.0, 110.0, 120.0, 80.0];
        let levels: Vec<(u64, &[f64])> = vec![(0, &flat), (10, &flat), (20, &flat)];
        let (_, fit) = fit(&levels, 3).unwrap();
        assert_eq!(fit.slope_ns, 0.0);
        assert!(!fit.is_significant(), "{fit:?}");
    }

    #[test]
    fn too_little_to_fit_is_none() {
        let runs = [1.0, 2.0];
        assert!(fit(&[(5, &runs)], 1).is_none());
        assert!(fit(&[(5, &runs), (5, &runs)], 1).is_none());
        assert!(fit(&[(5, &runs), (6, &[])], 1).is_none());
    }
}
