//! Ratios shown the way the reports print them: one home, so that a read
//! amplification reads the same in the text report and the HTML page. The
//! ratios themselves are figures of the run, worked out in analyze.

/// Pages read per page touched, to one decimal: "4.0x", or "-" when
/// nothing was touched.
pub fn amplification(ratio: Option<f64>) -> String {
    ratio
        .map(|a| format!("{a:.1}x"))
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amplification_reads_as_a_multiple() {
        assert_eq!(amplification(Some(4.0)), "4.0x");
        assert_eq!(amplification(Some(12.345)), "12.3x");
        assert_eq!(amplification(None), "-");
    }
}
