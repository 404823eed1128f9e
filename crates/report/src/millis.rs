//! Nanoseconds shown as milliseconds, in the precisions the reports use:
//! one home, so that a time reads the same wherever a section prints it.

/// Milliseconds to one decimal: "12.3".
pub fn tenths(ns: i64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

/// Milliseconds to one decimal, or "-" for a time not known.
pub fn tenths_or_dash(ns: Option<i64>) -> String {
    ns.map(tenths).unwrap_or_else(|| "-".into())
}

/// Milliseconds to two decimals: "12.34".
pub fn hundredths(ns: i64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

/// Milliseconds rounded to two decimals, as a number for JSON.
pub fn rounded_to_hundredths(ns: i64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_in_milliseconds() {
        assert_eq!(tenths(12_345_678), "12.3");
        assert_eq!(tenths_or_dash(Some(-50_000)), "-0.1");
        assert_eq!(tenths_or_dash(None), "-");
        assert_eq!(hundredths(12_345_678), "12.35");
        assert_eq!(rounded_to_hundredths(12_345_678), 12.35);
    }
}
