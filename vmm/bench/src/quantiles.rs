//! Medians and percentiles (nearest-rank quantiles) of timing samples.

/// The `pct` percentile (0..=100) of `v` by nearest rank; 0 for an empty slice.
pub fn percentile(v: &[u64], pct: usize) -> f64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    // Timing samples in nanoseconds are far below 2^52, where f64 is exact.
    rank(s.len(), pct).map_or(0.0, |i| s[i] as f64)
}

/// The index of the `pct` percentile by nearest rank in `len` sorted values (None: empty).
fn rank(len: usize, pct: usize) -> Option<usize> {
    let last = len.checked_sub(1)?;
    Some((last * pct.min(100) + 50) / 100)
}

/// The median of `v`.
pub fn median(v: &[u64]) -> f64 {
    percentile(v, 50)
}

/// The median (nearest rank) of fractional values; NaN for an empty slice.
pub fn median_f64(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_unstable_by(f64::total_cmp);
    rank(s.len(), 50).map_or(f64::NAN, |i| s[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles() {
        assert_eq!(median(&[5, 1, 3]), 3.0);
        assert_eq!(percentile(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90), 9.0);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median_f64(&[2.5, 0.5, 1.5]), 1.5);
        assert!(median_f64(&[]).is_nan());
    }
}
