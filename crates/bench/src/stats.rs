//! The statistics behind `coldstart bench`: a summary of one variant's
//! startup times, the ratio of two variants' means with its confidence
//! interval, and the Student t distribution both rest on.
//!
//! ln Γ comes from statrs; the t distribution itself is written here
//! because statrs 0.18's misses the SciPy values the tests hold: its
//! quantile at 0.975 with 10⁶ degrees of freedom is off by 6·10⁻⁵
//! (relative), its CDF at t = 1 by 1.6·10⁻¹⁰, it does not return within
//! seconds for 3·10⁷ degrees of freedom or more, its quantile at p = 10⁻¹²
//! with 1 degree of freedom has a CDF of 3.5·10⁻⁹, and its incomplete beta
//! and ln B lose up to 10⁻¹¹ for parameters near 5·10⁴.

use serde::Serialize;
use statrs::function::gamma::ln_gamma;

/// The t quantile of every interval here: 95%, two-sided.
const CI_QUANTILE: f64 = 0.975;

/// Iglewicz and Hoaglin's cut-off for the modified z-score.
const OUTLIER_Z: f64 = 3.5;

/// The 0.75 quantile of the standard normal distribution: it scales the MAD
/// to the standard deviation of normally distributed samples.
const MAD_TO_SIGMA: f64 = 0.6745;

/// What a set of startup times says about one variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// How many runs were timed.
    pub n: usize,
    /// The arithmetic mean.
    pub mean: f64,
    /// The middle time; the mean of the two middle ones for an even count.
    pub median: f64,
    /// The sample standard deviation (n - 1 in the denominator); None for a
    /// single run, which says nothing about spread.
    pub std_dev: Option<f64>,
    /// The fastest run.
    pub min: f64,
    /// The slowest run.
    pub max: f64,
    /// The 95% confidence interval of the mean (Student t, n - 1 degrees of
    /// freedom) as (low, high); None for fewer than two runs.
    pub ci95: Option<(f64, f64)>,
    /// Indices into the input of runs whose modified z-score (Iglewicz and
    /// Hoaglin) exceeds 3.5: runs disturbed by something else on the
    /// machine. Ascending.
    pub outliers: Vec<usize>,
}

/// Summarises the times of repeated runs of one variant.
///
/// None when `samples` is empty or holds a NaN or an infinity: such a time
/// means a measurement failed, and dropping it silently would shift the
/// outlier indices and hide the failure.
///
/// When at least half of the times are equal the MAD is 0 and the modified
/// z-score is undefined; no run is then flagged as an outlier, rather than
/// every run that differs from the median.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let n = samples.len();
    let mean = mean(samples);
    let std_dev = sample_variance(samples, mean).map(f64::sqrt);
    let ci95 = std_dev.map(|s| {
        let half_width = student_t_quantile(CI_QUANTILE, (n - 1) as f64) * s / (n as f64).sqrt();
        (mean - half_width, mean + half_width)
    });

    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = median_of_sorted(&sorted);

    let mut deviations: Vec<f64> = samples.iter().map(|x| (x - median).abs()).collect();
    deviations.sort_by(f64::total_cmp);
    let mad = median_of_sorted(&deviations);
    let outliers = if mad > 0.0 {
        samples
            .iter()
            .enumerate()
            .filter(|&(_, x)| MAD_TO_SIGMA * (x - median).abs() / mad > OUTLIER_Z)
            .map(|(index, _)| index)
            .collect()
    } else {
        Vec::new()
    };

    Some(Summary {
        n,
        mean,
        median,
        std_dev,
        min: sorted[0],
        max: sorted[n - 1],
        ci95,
        outliers,
    })
}

/// Half the width of the 95% interval as a fraction of the mean: how
/// precisely the mean is known. When it is large (say above 0.05) the runs
/// spread too widely to conclude anything, and the user should run more
/// iterations or quiet the machine. None without an interval or with a
/// zero mean.
pub fn relative_ci_half_width(summary: &Summary) -> Option<f64> {
    let (low, high) = summary.ci95?;
    if summary.mean == 0.0 {
        return None;
    }
    Some((high - low) / 2.0 / summary.mean.abs())
}

/// How much slower (above 1) or faster (below 1) a variant is than the
/// baseline, mean against mean.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    /// mean(variant) / mean(baseline).
    pub ratio: f64,
    /// The 95% confidence interval of the ratio by Fieller's theorem, as
    /// (low, high); None when it is unbounded (the baseline mean is not
    /// clearly away from zero) or a side has fewer than two runs.
    pub ci95: Option<(f64, f64)>,
}

impl Ratio {
    /// Whether the interval lies entirely above or entirely below 1: the
    /// variants differ by more than run-to-run noise explains. False
    /// without an interval.
    pub fn excludes_one(&self) -> bool {
        match self.ci95 {
            Some((low, high)) => low > 1.0 || high < 1.0,
            None => false,
        }
    }
}

/// The ratio of the variant's mean time to the baseline's, with a 95%
/// interval by Fieller's theorem for independent samples of unequal
/// variances (degrees of freedom by Welch–Satterthwaite at the point
/// ratio).
///
/// None when a side is empty or holds a NaN or an infinity, or when the
/// baseline mean is 0. When neither side varies the interval is the point
/// ratio itself.
pub fn ratio_of_means(variant: &[f64], baseline: &[f64]) -> Option<Ratio> {
    let finite = |xs: &[f64]| !xs.is_empty() && xs.iter().all(|x| x.is_finite());
    if !finite(variant) || !finite(baseline) {
        return None;
    }
    let mean_variant = mean(variant);
    let mean_baseline = mean(baseline);
    if mean_baseline == 0.0 {
        return None;
    }
    let ratio = mean_variant / mean_baseline;
    let ci95 = fieller_interval(variant, mean_variant, baseline, mean_baseline, ratio);
    Some(Ratio { ratio, ci95 })
}

/// The set of ρ with (mB − ρ·mA)² ≤ t²·(vB + ρ²·vA), where vB and vA are
/// the squared standard errors of the variant and baseline means.
fn fieller_interval(
    variant: &[f64],
    mean_variant: f64,
    baseline: &[f64],
    mean_baseline: f64,
    ratio: f64,
) -> Option<(f64, f64)> {
    let (n_variant, n_baseline) = (variant.len() as f64, baseline.len() as f64);
    let var_variant = sample_variance(variant, mean_variant)? / n_variant;
    let var_baseline = sample_variance(baseline, mean_baseline)? / n_baseline;
    if var_variant == 0.0 && var_baseline == 0.0 {
        return Some((ratio, ratio));
    }

    // Welch–Satterthwaite for mB − r·mA, whose variance is vB + r²·vA;
    // when one term is 0 it reduces to the other side's n − 1.
    let scaled_var_baseline = ratio * ratio * var_baseline;
    let df = if var_variant == 0.0 {
        n_baseline - 1.0
    } else if scaled_var_baseline == 0.0 {
        n_variant - 1.0
    } else {
        (var_variant + scaled_var_baseline).powi(2)
            / (var_variant.powi(2) / (n_variant - 1.0)
                + scaled_var_baseline.powi(2) / (n_baseline - 1.0))
    };
    let t = student_t_quantile(CI_QUANTILE, df);
    let t2 = t * t;

    // a·ρ² − 2·h·ρ + c = 0.
    let a = mean_baseline * mean_baseline - t2 * var_baseline;
    if a <= 0.0 {
        return None;
    }
    let h = mean_baseline * mean_variant;
    let c = mean_variant * mean_variant - t2 * var_variant;
    // h² − a·c expanded, so that the mA²·mB² terms do not cancel; it is
    // non-negative because the point ratio lies inside the interval.
    let discriminant = t2
        * (mean_baseline * mean_baseline * var_variant
            + mean_variant * mean_variant * var_baseline
            - t2 * var_baseline * var_variant);
    // The root away from zero first, the other from the product of roots,
    // to avoid subtracting nearly equal numbers.
    let q = h + h.signum() * discriminant.max(0.0).sqrt();
    let first = q / a;
    let second = if q == 0.0 { first } else { c / q };
    Some((first.min(second), first.max(second)))
}

fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len() as f64
}

/// The unbiased variance, by two passes; None below two samples.
fn sample_variance(samples: &[f64], mean: f64) -> Option<f64> {
    if samples.len() < 2 {
        return None;
    }
    let squares: f64 = samples.iter().map(|x| (x - mean).powi(2)).sum();
    Some(squares / (samples.len() - 1) as f64)
}

/// The middle value; the mean of the two middle ones for an even count.
/// `values` must not be empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    median_of_sorted(&sorted)
}

fn median_of_sorted(sorted: &[f64]) -> f64 {
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// The probability that Student's t with `df` degrees of freedom is at most
/// `t`: how likely a difference of `t` standard errors is by chance alone.
/// `df` need not be a whole number (Welch's approximation gives fractional
/// ones); an infinite `df` gives the normal distribution. NaN when `t` is
/// NaN or `df` is not a positive number.
pub fn student_t_cdf(t: f64, df: f64) -> f64 {
    if t.is_nan() || !valid_df(df) {
        return f64::NAN;
    }
    let tail = student_t_upper_tail(t.abs(), df);
    if t > 0.0 { 1.0 - tail } else { tail }
}

/// The `p` quantile of Student's t with `df` degrees of freedom: the factor
/// a confidence interval multiplies the standard error by, e.g.
/// `student_t_quantile(0.975, n - 1)` for a 95% interval from n runs.
/// `df` need not be a whole number; an infinite `df` gives the normal
/// quantile. Infinite at `p` = 0 or 1; NaN when `p` is outside [0, 1] or
/// `df` is not a positive number.
pub fn student_t_quantile(p: f64, df: f64) -> f64 {
    if !(0.0..=1.0).contains(&p) || !valid_df(df) {
        return f64::NAN;
    }
    if p == 0.5 {
        return 0.0;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    // Keep the probability in a form that is exact: p − ½ for p in [¼, 1]
    // and 1 − p for p in [½, 1] lose nothing (Sterbenz), so the quantile
    // keeps its relative precision near the median and far in the tails.
    let side = if (0.25..=0.75).contains(&p) {
        Side::Center((p - 0.5).abs())
    } else {
        Side::Tail(p.min(1.0 - p))
    };
    let magnitude = if df >= LARGE_DF {
        cornish_fisher(normal_magnitude(side), df)
    } else {
        student_t_magnitude(side, df)
    };
    if p > 0.5 { magnitude } else { -magnitude }
}

// From here on, the numerical methods behind the two functions above.

/// Below this many degrees of freedom the t distribution comes from the
/// regularized incomplete beta function by its continued fraction. From
/// here up that fraction loses digits (its terms cancel to about
/// df·10⁻¹⁷) and needs ever more of them, while the Cornish–Fisher
/// expansion around the normal distribution is exact to double precision.
const LARGE_DF: f64 = 1e5;

fn valid_df(df: f64) -> bool {
    df > 0.0 && !df.is_nan()
}

/// A probability on the upper half of a symmetric distribution, in the
/// form it is known without rounding.
#[derive(Clone, Copy)]
enum Side {
    /// P(0 < X < x).
    Center(f64),
    /// P(X > x).
    Tail(f64),
}

/// The x ≥ 0 at which Student's t has the given probability.
fn student_t_magnitude(side: Side, df: f64) -> f64 {
    let density = |t| student_t_density(t, df);
    match side {
        Side::Center(center) => solve_increasing(|t| student_t_center(t, df) - center, density),
        Side::Tail(tail) => solve_increasing(|t| tail - student_t_upper_tail(t, df), density),
    }
}

/// The x ≥ 0 at which the standard normal distribution has the given
/// probability.
fn normal_magnitude(side: Side) -> f64 {
    match side {
        Side::Center(center) => solve_increasing(|z| normal_center(z) - center, normal_density),
        Side::Tail(tail) => solve_increasing(|z| tail - normal_upper_tail(z), normal_density),
    }
}

/// P(T > t) for t ≥ 0.
fn student_t_upper_tail(t: f64, df: f64) -> f64 {
    if df >= LARGE_DF {
        return normal_upper_tail(inverse_cornish_fisher(t, df));
    }
    // I_x(df/2, ½) / 2 with x = df / (df + t²).
    let a = df / 2.0;
    let w = t / df.sqrt();
    if w > 1e150 {
        // w² would overflow (a far tail at small df): x = 1/(1 + w²) is w⁻²
        // to double precision, and the continued fraction is 1.
        return 0.5 * (-2.0 * a * w.ln() - ln_beta(a, 0.5)).exp() / a;
    }
    // x and 1 − x each from w², so neither is a difference of nearly equal
    // numbers.
    let z = w * w;
    let (x, y) = (1.0 / (1.0 + z), z / (1.0 + z));
    0.5 * regularized_incomplete_beta(a, 0.5, x, y)
}

/// P(0 < T < t) for t ≥ 0 and df below `LARGE_DF`: I_y(½, df/2) / 2 with
/// y = t² / (df + t²).
fn student_t_center(t: f64, df: f64) -> f64 {
    let z = t * t / df;
    if z.is_infinite() {
        return 0.5;
    }
    let (x, y) = (1.0 / (1.0 + z), z / (1.0 + z));
    0.5 * regularized_incomplete_beta(0.5, df / 2.0, y, x)
}

/// The density of Student's t: (1 + t²/df)^−(df+1)/2 / (√df·B(df/2, ½)).
fn student_t_density(t: f64, df: f64) -> f64 {
    (-ln_beta(df / 2.0, 0.5) - 0.5 * df.ln() - (df + 1.0) / 2.0 * (t * t / df).ln_1p()).exp()
}

/// The t quantile from the normal quantile z by the Cornish–Fisher
/// expansion in 1/df (Abramowitz and Stegun 26.7.5). With df ≥ 10⁵ the
/// first omitted term is below 10⁻¹⁵ of t for |z| up to 10 and below 10⁻¹²
/// where the normal tail underflows.
fn cornish_fisher(z: f64, df: f64) -> f64 {
    let z2 = z * z;
    let g1 = z * (z2 + 1.0) / 4.0;
    let g2 = z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0;
    let g3 = z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0;
    let g4 = z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0;
    let h = 1.0 / df;
    z + h * (g1 + h * (g2 + h * (g3 + h * g4)))
}

/// Beyond this the normal upper tail underflows to 0.
const NORMAL_TAIL_UNDERFLOW: f64 = 40.0;

/// The normal deviate z whose Cornish–Fisher t is `t` (t ≥ 0), so that
/// P(T > t) = P(Z > z). By fixed-point steps, each of which shrinks the
/// error by a factor of 80 or more when df ≥ 10⁵ and z < 40.
fn inverse_cornish_fisher(t: f64, df: f64) -> f64 {
    if t >= NORMAL_TAIL_UNDERFLOW {
        return t;
    }
    let mut z = t;
    for _ in 0..50 {
        let next = z - (cornish_fisher(z, df) - t);
        if (next - z).abs() <= f64::EPSILON * z {
            return next;
        }
        z = next;
    }
    z
}

/// P(Z > z) for the standard normal Z and z ≥ 0.
fn normal_upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// P(0 < Z < z) for the standard normal Z and z ≥ 0.
fn normal_center(z: f64) -> f64 {
    0.5 * erf(z / std::f64::consts::SQRT_2)
}

fn normal_density(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Below this erf has a series without cancellation; above it erfc has a
/// continued fraction that converges in under a hundred terms.
const ERF_SERIES_LIMIT: f64 = 1.5;

/// erf(u) for u ≥ 0.
fn erf(u: f64) -> f64 {
    if u < ERF_SERIES_LIMIT {
        erf_series(u)
    } else {
        1.0 - erfc_fraction(u)
    }
}

/// erfc(u) for u ≥ 0.
fn erfc(u: f64) -> f64 {
    if u < ERF_SERIES_LIMIT {
        1.0 - erf_series(u)
    } else {
        erfc_fraction(u)
    }
}

/// erf(u) = 2/√π · e^(−u²) · Σ (2u²)ⁿ·u / (1·3·5···(2n + 1)), whose terms
/// are all positive.
fn erf_series(u: f64) -> f64 {
    let mut term = u;
    let mut sum = u;
    let mut n = 0.0;
    while term > f64::EPSILON * sum {
        n += 1.0;
        term *= 2.0 * u * u / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / std::f64::consts::PI.sqrt() * (-u * u).exp() * sum
}

/// erfc(u) = e^(−u²)/√π · 1 / (u + ½/(u + 1/(u + (3/2)/(u + …)))) for
/// u > 0, evaluated by the modified Lentz method.
fn erfc_fraction(u: f64) -> f64 {
    let mut value = u;
    let (mut c, mut d) = (u, 0.0);
    for n in 1..=1000 {
        let numerator = f64::from(n) / 2.0;
        d = 1.0 / lentz_guard(u + numerator * d);
        c = lentz_guard(u + numerator / c);
        let step = c * d;
        value *= step;
        if (step - 1.0).abs() <= f64::EPSILON {
            break;
        }
    }
    (-u * u).exp() / (std::f64::consts::PI.sqrt() * value)
}

/// Keeps a Lentz denominator away from zero.
fn lentz_guard(value: f64) -> f64 {
    const TINY: f64 = 1e-300;
    if value.abs() < TINY { TINY } else { value }
}

/// The x ≥ 0 where `f`, increasing with derivative `derivative` and
/// negative at 0, crosses zero: Newton's method kept inside a bracket that
/// shrinks every step, bisecting whenever a Newton step would leave it.
fn solve_increasing(f: impl Fn(f64) -> f64, derivative: impl Fn(f64) -> f64) -> f64 {
    let mut low = 0.0;
    let mut high = 1.0;
    while f(high) < 0.0 {
        low = high;
        high *= 2.0;
        if high.is_infinite() {
            return f64::INFINITY;
        }
    }
    let mut x = (low + high) / 2.0;
    for _ in 0..400 {
        let value = f(x);
        if value == 0.0 {
            return x;
        }
        if value < 0.0 {
            low = x;
        } else {
            high = x;
        }
        let newton = x - value / derivative(x);
        let next = if newton > low && newton < high {
            newton
        } else if low > 0.0 && high > 4.0 * low {
            // A bracket spanning orders of magnitude (a far tail at small
            // df) shrinks faster in the logarithm.
            (low * high).sqrt()
        } else {
            (low + high) / 2.0
        };
        if (next - x).abs() <= 4.0 * f64::EPSILON * x || next == low || next == high {
            return next;
        }
        x = next;
    }
    x
}

/// The regularized incomplete beta function I_x(a, b), given both x and
/// y = 1 − x so that callers near x = 1 keep their precision.
fn regularized_incomplete_beta(a: f64, b: f64, x: f64, y: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if y <= 0.0 {
        return 1.0;
    }
    // The continued fraction converges fast below about the mean of the
    // beta distribution; above it, use I_x(a, b) = 1 − I_y(b, a).
    if x > (a + 1.0) / (a + b + 2.0) {
        1.0 - incomplete_beta_fraction(b, a, y, x)
    } else {
        incomplete_beta_fraction(a, b, x, y)
    }
}

/// I_x(a, b) = x^a·y^b / (a·B(a, b)) · 1 / (1 + d₁/(1 + d₂/(1 + …))) with
/// d₂ₘ₊₁ = −(a + m)(a + b + m)·x / ((a + 2m)(a + 2m + 1)) and
/// d₂ₘ = m(b − m)·x / ((a + 2m − 1)(a + 2m)), evaluated by the modified
/// Lentz method.
fn incomplete_beta_fraction(a: f64, b: f64, x: f64, y: f64) -> f64 {
    // ln x and ln y, each from whichever of x and y is the smaller.
    let ln_x = if x > 0.5 { (-y).ln_1p() } else { x.ln() };
    let ln_y = if y > 0.5 { (-x).ln_1p() } else { y.ln() };
    let front = (a * ln_x + b * ln_y - ln_beta(a, b)).exp() / a;

    // Lentz: the value is the product of the ratios c·d of successive
    // convergents, started by the leading 1 / (1 + d₁).
    let mut c = 1.0;
    let mut d = 1.0 / lentz_guard(1.0 - (a + b) * x / (a + 1.0));
    let mut value = d;
    // Terms needed grow like √max(a, b); the cap only stops a runaway.
    let max_terms = 1000 + 10 * (a.max(b).sqrt() as usize);
    for m in 1..=max_terms {
        let m = m as f64;
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / lentz_guard(1.0 + even * d);
        c = lentz_guard(1.0 + even / c);
        value *= c * d;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / lentz_guard(1.0 + odd * d);
        c = lentz_guard(1.0 + odd / c);
        let step = c * d;
        value *= step;
        if (step - 1.0).abs() <= f64::EPSILON {
            break;
        }
    }
    front * value
}

/// ln B(a, b) = ln Γ(a) + ln Γ(b) − ln Γ(a + b), for a, b > 0.
fn ln_beta(a: f64, b: f64) -> f64 {
    let (small, large) = if a < b { (a, b) } else { (b, a) };
    if large < STIRLING_FROM {
        return ln_gamma(small) + ln_gamma(large) - ln_gamma(small + large);
    }
    // ln Γ(large) − ln Γ(large + small) from Stirling's series, with the
    // nearly equal (x − ½)·ln x − x terms subtracted analytically: at
    // df = 10⁵ each is about 5·10⁵ and their difference about 6.
    let gamma_ratio = -(large - 0.5) * (small / large).ln_1p() - small * (large + small).ln()
        + small
        + stirling_correction(large)
        - stirling_correction(large + small);
    ln_gamma(small) + gamma_ratio
}

/// Where Stirling's series alone is accurate to double precision.
const STIRLING_FROM: f64 = 10.0;

/// ln Γ(x) − ((x − ½)·ln x − x + ½·ln 2π) for x ≥ 10: the series
/// Σ B₂ₖ / (2k(2k − 1)·x^(2k−1)) in the Bernoulli numbers B₂ₖ. Eight terms
/// leave an error below 10⁻¹⁷ at x = 10.
fn stirling_correction(x: f64) -> f64 {
    // B₂ₖ / (2k(2k − 1)) for k = 1..=8.
    const COEFFICIENTS: [f64; 8] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360360.0,
        1.0 / 156.0,
        -3617.0 / 122400.0,
    ];
    let inverse_square = 1.0 / (x * x);
    let series = COEFFICIENTS
        .iter()
        .rev()
        .fold(0.0, |sum, coefficient| sum * inverse_square + coefficient);
    series / x
}

#[cfg(test)]
mod tests {
    //! Expected values come from SciPy 1.17 and NumPy, never from the code
    //! under test; each carries the Python expression that produced it,
    //! run after `import numpy as np; from scipy import stats, special`.

    use super::*;

    #[track_caller]
    fn assert_close(actual: f64, expected: f64, relative: f64) {
        let error = (actual - expected).abs();
        assert!(
            error <= relative * expected.abs(),
            "{actual} is not within {relative} (relative) of {expected}: off by {error:e}"
        );
    }

    #[track_caller]
    fn assert_interval(actual: Option<(f64, f64)>, expected: (f64, f64), relative: f64) {
        let (low, high) = actual.expect("an interval");
        assert_close(low, expected.0, relative);
        assert_close(high, expected.1, relative);
    }

    const QUANTILE_TOLERANCE: f64 = 1e-9;
    const SUM_TOLERANCE: f64 = 1e-9;

    #[test]
    fn t_quantile_at_975_matches_scipy() {
        let cases = [
            (1.0, 12.706204736174694),    // stats.t.ppf(0.975, 1)
            (2.0, 4.302652729749462),     // stats.t.ppf(0.975, 2)
            (3.0, 3.1824463052837078),    // stats.t.ppf(0.975, 3)
            (5.0, 2.5705818356363146),    // stats.t.ppf(0.975, 5)
            (9.0, 2.262157162798205),     // stats.t.ppf(0.975, 9)
            (29.0, 2.045229642132703),    // stats.t.ppf(0.975, 29)
            (1000.0, 1.9623390808264083), // stats.t.ppf(0.975, 1000)
            (1e6, 1.959966356814107),     // stats.t.ppf(0.975, 1e6)
            (7.5, 2.333039626864974),     // stats.t.ppf(0.975, 7.5)
        ];
        for (df, expected) in cases {
            assert_close(student_t_quantile(0.975, df), expected, QUANTILE_TOLERANCE);
        }
    }

    #[test]
    fn t_quantile_one_degree_is_the_cauchy_quantile() {
        // An oracle in closed form: t with 1 df is Cauchy, tan(π(p − ½)).
        let expected = (std::f64::consts::PI * 0.475).tan();
        assert_close(student_t_quantile(0.975, 1.0), expected, QUANTILE_TOLERANCE);
    }

    #[test]
    fn t_quantile_tends_to_the_normal_quantile() {
        // stats.norm.ppf(0.975)
        let normal = 1.959963984540054;
        assert_close(
            student_t_quantile(0.975, f64::INFINITY),
            normal,
            QUANTILE_TOLERANCE,
        );
        assert_close(student_t_quantile(0.975, 1e12), normal, QUANTILE_TOLERANCE);
    }

    #[test]
    fn t_quantile_elsewhere_matches_scipy() {
        // stats.t.ppf(0.5, 9)
        assert_eq!(student_t_quantile(0.5, 9.0), 0.0);
        // stats.t.ppf(0.025, 9)
        let lower = student_t_quantile(0.025, 9.0);
        assert_close(lower, -2.2621571627982053, QUANTILE_TOLERANCE);
        assert_close(-lower, student_t_quantile(0.975, 9.0), 1e-15);
        // stats.t.ppf(0.995, 9)
        assert_close(
            student_t_quantile(0.995, 9.0),
            3.249835541592126,
            QUANTILE_TOLERANCE,
        );
        // stats.t.ppf(0.6, 2.5)
        assert_close(
            student_t_quantile(0.6, 2.5),
            0.2814595127485477,
            QUANTILE_TOLERANCE,
        );
        // stats.t.ppf(1e-10, 3)
        assert_close(
            student_t_quantile(1e-10, 3.0),
            -2225.769284683093,
            QUANTILE_TOLERANCE,
        );
    }

    #[test]
    fn t_quantile_outside_its_domain() {
        assert_eq!(student_t_quantile(1.0, 5.0), f64::INFINITY);
        assert_eq!(student_t_quantile(0.0, 5.0), f64::NEG_INFINITY);
        assert!(student_t_quantile(1.5, 5.0).is_nan());
        assert!(student_t_quantile(-0.1, 5.0).is_nan());
        assert!(student_t_quantile(f64::NAN, 5.0).is_nan());
        assert!(student_t_quantile(0.975, 0.0).is_nan());
        assert!(student_t_quantile(0.975, -3.0).is_nan());
        assert!(student_t_quantile(0.975, f64::NAN).is_nan());
    }

    #[test]
    fn t_cdf_matches_scipy() {
        let cases = [
            (2.0, 5.0, 0.9490302605850708),       // stats.t.cdf(2.0, 5)
            (-1.5, 3.0, 0.11529193262241147),     // stats.t.cdf(-1.5, 3)
            (0.3, 7.5, 0.6138386707156109),       // stats.t.cdf(0.3, 7.5)
            (3.0, 1.0, 0.8975836176504333),       // stats.t.cdf(3.0, 1)
            (-4.0, 29.0, 0.00020003197282624587), // stats.t.cdf(-4.0, 29)
            (1.0, 1e6, 0.8413446250832108),       // stats.t.cdf(1.0, 1e6)
            (-10.0, 2.5, 0.0022207478836537117),  // stats.t.cdf(-10.0, 2.5)
        ];
        for (t, df, expected) in cases {
            assert_close(student_t_cdf(t, df), expected, 1e-12);
        }
        assert_eq!(student_t_cdf(0.0, 4.0), 0.5);
        assert!(student_t_cdf(f64::NAN, 4.0).is_nan());
        assert!(student_t_cdf(1.0, 0.0).is_nan());
    }

    #[test]
    fn t_cdf_inverts_the_quantile() {
        for df in [0.5, 1.0, 4.0, 7.5, 99_999.0, 1e5, 3e7] {
            for p in [1e-12, 0.01, 0.3, 0.5, 0.7, 0.975, 0.999] {
                let t = student_t_quantile(p, df);
                assert_close(student_t_cdf(t, df), p, 1e-12);
            }
        }
    }

    #[test]
    fn special_functions_match_scipy() {
        // special.gammaln(0.5)
        assert_close(ln_gamma(0.5), 0.5723649429247, 1e-14);
        // special.gammaln(0.001)
        assert_close(ln_gamma(0.001), 6.907178885383853, 1e-14);
        // special.gammaln(10)
        assert_close(ln_gamma(10.0), 12.801827480081469, 1e-14);
        // special.gammaln(12345.6)
        assert_close(ln_gamma(12345.6), 103959.18506616844, 1e-14);
        // Near its zeros only the absolute error is small: ln Γ(10) − ln 9!.
        assert!(ln_gamma(1.0).abs() < 1e-14 && ln_gamma(2.0).abs() < 1e-14);
        // special.betaln(5e4, 0.5) is off here by 7e-12 (relative); at 40
        // digits, mpmath.log(mpmath.beta(50000, 0.5)) gives this.
        assert_close(ln_beta(5e4, 0.5), -4.837521699280441, 1e-14);
        // special.erf(0.7)
        assert_close(erf(0.7), 0.6778011938374183, 1e-14);
        // special.erfc(1.2)
        assert_close(erfc(1.2), 0.08968602177036462, 1e-14);
        // special.erfc(3.0)
        assert_close(erfc(3.0), 2.2090496998585445e-05, 1e-14);
    }

    /// Ten startup times in milliseconds, no outliers.
    /// x = np.array([102.3, 98.7, 101.1, 99.4, 100.8, 97.9, 103.5, 100.2, 99.0, 101.6])
    const TIMINGS: [f64; 10] = [
        102.3, 98.7, 101.1, 99.4, 100.8, 97.9, 103.5, 100.2, 99.0, 101.6,
    ];

    #[test]
    fn summarize_worked_example() {
        let summary = summarize(&TIMINGS).expect("a summary");
        assert_eq!(summary.n, 10);
        // x.mean()
        assert_close(summary.mean, 100.45, SUM_TOLERANCE);
        // np.median(x)
        assert_close(summary.median, 100.5, SUM_TOLERANCE);
        // x.std(ddof=1)
        assert_close(
            summary.std_dev.expect("a spread"),
            1.745629463036819,
            SUM_TOLERANCE,
        );
        assert_eq!((summary.min, summary.max), (97.9, 103.5));
        // stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        assert_interval(
            summary.ci95,
            (99.20125190835076, 101.69874809164925),
            SUM_TOLERANCE,
        );
        // max(0.6745 * abs(x - np.median(x)) / np.median(abs(x - np.median(x)))) is 1.557
        assert!(summary.outliers.is_empty());
        // np.diff(stats.t.interval(0.95, 9, loc=x.mean(), scale=stats.sem(x)))[0] / 2 / x.mean()
        let width = relative_ci_half_width(&summary).expect("a width");
        assert_close(width, 0.012431538991032824, SUM_TOLERANCE);
    }

    #[test]
    fn summarize_one_run_has_no_spread() {
        let summary = summarize(&[42.0]).expect("a summary");
        assert_eq!(summary.n, 1);
        assert_eq!((summary.mean, summary.median), (42.0, 42.0));
        assert_eq!((summary.min, summary.max), (42.0, 42.0));
        assert_eq!(summary.std_dev, None);
        assert_eq!(summary.ci95, None);
        assert!(summary.outliers.is_empty());
        assert_eq!(relative_ci_half_width(&summary), None);
    }

    #[test]
    fn summarize_two_runs() {
        let summary = summarize(&[10.0, 12.0]).expect("a summary");
        assert_eq!((summary.mean, summary.median), (11.0, 11.0));
        // np.std([10.0, 12.0], ddof=1) is √2.
        let std_dev = summary.std_dev.expect("a spread");
        assert_close(std_dev, std::f64::consts::SQRT_2, SUM_TOLERANCE);
        // stats.t.interval(0.95, 1, loc=11.0, scale=stats.sem([10.0, 12.0]))
        assert_interval(
            summary.ci95,
            (-1.7062047361746941, 23.706204736174694),
            SUM_TOLERANCE,
        );
        assert!(summary.outliers.is_empty());
    }

    #[test]
    fn summarize_identical_runs() {
        let summary = summarize(&[5.0; 6]).expect("a summary");
        assert_eq!(summary.std_dev, Some(0.0));
        assert_eq!(summary.ci95, Some((5.0, 5.0)));
        assert!(summary.outliers.is_empty());
        assert_eq!(relative_ci_half_width(&summary), Some(0.0));
    }

    #[test]
    fn summarize_even_count_median_is_the_middle_mean() {
        let summary = summarize(&[4.0, 1.0, 3.0, 2.0]).expect("a summary");
        assert_eq!(summary.median, 2.5);
        assert_eq!((summary.min, summary.max), (1.0, 4.0));
    }

    #[test]
    fn summarize_flags_a_clear_outlier_only() {
        // y = np.array([100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 130.0, 102.6, 100.1])
        // 0.6745 * abs(y - np.median(y)) / np.median(abs(y - np.median(y)))
        // is 40.27 at index 7 and 3.305 at index 8, under the 3.5 cut-off.
        let times = [
            100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 130.0, 102.6, 100.1,
        ];
        let summary = summarize(&times).expect("a summary");
        assert_eq!(summary.outliers, vec![7]);

        // The same with 102.8 at index 8: its score is 3.575, just above.
        let mut times = times;
        times[8] = 102.8;
        let summary = summarize(&times).expect("a summary");
        assert_eq!(summary.outliers, vec![7, 8]);
    }

    #[test]
    fn summarize_with_zero_mad_flags_nothing() {
        // Most runs equal: the MAD is 0 and the score undefined.
        let summary = summarize(&[5.0, 5.0, 5.0, 5.0, 9.0]).expect("a summary");
        assert!(summary.outliers.is_empty());
    }

    #[test]
    fn summarize_rejects_empty_and_non_finite_input() {
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[1.0, f64::NAN, 2.0]), None);
        assert_eq!(summarize(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn summary_serializes_with_nulls_and_pairs() {
        let json = serde_json::to_value(summarize(&[42.0]).expect("a summary")).expect("json");
        assert_eq!(json["std_dev"], serde_json::Value::Null);
        assert_eq!(json["ci95"], serde_json::Value::Null);
        let json = serde_json::to_value(summarize(&[5.0, 5.0]).expect("a summary")).expect("json");
        assert_eq!(json["ci95"], serde_json::json!([5.0, 5.0]));
    }

    /// Baseline A, ten runs in milliseconds.
    /// a = np.array([120.4, 118.9, 121.7, 119.5, 122.3, 120.8, 119.1, 121.2, 120.0, 118.6])
    const BASELINE: [f64; 10] = [
        120.4, 118.9, 121.7, 119.5, 122.3, 120.8, 119.1, 121.2, 120.0, 118.6,
    ];

    // Fieller's interval in NumPy, for variant b against baseline a:
    //   mA, mB = a.mean(), b.mean(); vA, vB = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    //   r = mB / mA
    //   df = (vB + r**2 * vA)**2 / (vB**2 / (len(b) - 1) + r**4 * vA**2 / (len(a) - 1))
    //   t = stats.t.ppf(0.975, df)
    //   qa, qb, qc = mA**2 - t**2 * vA, -2 * mA * mB, mB**2 - t**2 * vB
    //   ((-qb - np.sqrt(qb**2 - 4 * qa * qc)) / (2 * qa), (-qb + np.sqrt(qb**2 - 4 * qa * qc)) / (2 * qa))
    // np.sort(np.roots([qa, qb, qc])) agrees to 4e-15.

    #[test]
    fn ratio_of_a_clear_speedup() {
        // b = np.array([101.2, 99.8, 103.4, 100.6, 102.1, 98.9, 101.7, 100.3])
        let variant = [101.2, 99.8, 103.4, 100.6, 102.1, 98.9, 101.7, 100.3];
        let ratio = ratio_of_means(&variant, &BASELINE).expect("a ratio");
        // b.mean() / a.mean()
        assert_close(ratio.ratio, 0.83991683991684, SUM_TOLERANCE);
        // The quadratic above; df = 12.61293891994642, t = 2.167127294493227.
        assert_interval(
            ratio.ci95,
            (0.8291468739144647, 0.8507718310483435),
            SUM_TOLERANCE,
        );
        assert!(ratio.excludes_one());
    }

    #[test]
    fn ratio_within_noise_does_not_exclude_one() {
        // b = np.array([121.0, 119.2, 120.9, 122.1, 118.7, 120.5, 121.8, 119.9])
        let variant = [121.0, 119.2, 120.9, 122.1, 118.7, 120.5, 121.8, 119.9];
        let ratio = ratio_of_means(&variant, &BASELINE).expect("a ratio");
        // b.mean() / a.mean()
        assert_close(ratio.ratio, 1.0021829521829522, SUM_TOLERANCE);
        // The quadratic above; df = 15.443912650059092, t = 2.1261258962640617.
        assert_interval(
            ratio.ci95,
            (0.9920105362657313, 1.0124530167648484),
            SUM_TOLERANCE,
        );
        assert!(!ratio.excludes_one());
    }

    #[test]
    fn ratio_against_a_constant_variant() {
        // b = np.array([100.0, 100.0, 100.0, 100.0]): vB is 0, so the degrees
        // of freedom are the baseline's alone (the formula above gives 9.0).
        let ratio = ratio_of_means(&[100.0; 4], &BASELINE).expect("a ratio");
        // b.mean() / a.mean()
        assert_close(ratio.ratio, 0.8316008316008316, SUM_TOLERANCE);
        // The quadratic above.
        assert_interval(
            ratio.ci95,
            (0.8254707037272938, 0.8378226880396411),
            SUM_TOLERANCE,
        );
    }

    #[test]
    fn ratio_with_a_single_run_has_no_interval() {
        let ratio = ratio_of_means(&[60.0], &BASELINE).expect("a ratio");
        // 60 / a.mean()
        assert_close(ratio.ratio, 0.498960498960499, SUM_TOLERANCE);
        assert_eq!(ratio.ci95, None);
        assert!(!ratio.excludes_one());
        assert_eq!(
            ratio_of_means(&BASELINE, &[120.0]).expect("a ratio").ci95,
            None
        );
    }

    #[test]
    fn ratio_over_a_baseline_near_zero_is_unbounded() {
        // a = np.array([-1.0, 3.0]); b = np.array([2.0, 2.5]): with the
        // quantities above, qa = mA**2 - t**2 * vA = -626.35 < 0.
        let ratio = ratio_of_means(&[2.0, 2.5], &[-1.0, 3.0]).expect("a ratio");
        assert_eq!(ratio.ratio, 2.25);
        assert_eq!(ratio.ci95, None);
    }

    #[test]
    fn ratio_without_spread_is_exact() {
        let ratio = ratio_of_means(&[2.0, 2.0, 2.0], &[1.0, 1.0, 1.0]).expect("a ratio");
        assert_eq!(ratio.ratio, 2.0);
        assert_eq!(ratio.ci95, Some((2.0, 2.0)));
        assert!(ratio.excludes_one());
    }

    #[test]
    fn ratio_rejects_zero_baseline_and_bad_input() {
        assert_eq!(ratio_of_means(&[1.0, 2.0], &[-1.0, 1.0]), None);
        assert_eq!(ratio_of_means(&[], &BASELINE), None);
        assert_eq!(ratio_of_means(&BASELINE, &[]), None);
        assert_eq!(ratio_of_means(&[1.0, f64::NAN], &BASELINE), None);
    }
}
