//! The share test of `hvprof compare`: is a symbol's share of samples larger in the new run than
//! in the base run by more than a threshold, and is that more than sampling noise?
//!
//! Each sample lands in a symbol with some probability; over a run, a symbol's count is close to
//! binomial in the run's total. The test is the one-sided two-proportion z-test on the shares
//! (H0: the new share is not larger), with a Bonferroni correction over the symbols tested, so
//! `alpha` bounds the chance of flagging anything in a comparison of two unchanged runs as long
//! as the binomial model holds. Symbols with fewer than `min_samples` in both runs together are
//! not tested (their shares carry no information at the threshold), and a regression must also
//! grow the share by `min_points` percentage points: run-to-run variation that is real but not
//! sampling noise (a guest kernel's interrupt path taking longer on a loaded host) stays below
//! that in the shares of small functions.

/// One row: a symbol (or bucket) in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Symbol or bucket name.
    pub name: String,
    /// Samples in the base run.
    pub base: u64,
    /// Samples in the new run.
    pub new: u64,
    /// Share of the base run's samples, in percent.
    pub base_share: f64,
    /// Share of the new run's samples, in percent.
    pub new_share: f64,
    /// Relative change of the share, in percent (infinite for a symbol new in `new`).
    pub relative: f64,
    /// One-sided p-value of "the share grew".
    pub p_value: f64,
    /// Tested (enough samples).
    pub tested: bool,
    /// A significant increase above the threshold.
    pub regression: bool,
}

/// Test parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TestOptions {
    /// Smallest relative increase of a share that counts, in percent.
    pub threshold: f64,
    /// Family-wise significance level.
    pub alpha: f64,
    /// Samples (base + new) a symbol needs to be tested.
    pub min_samples: u64,
    /// Smallest absolute increase of a share that counts, in percentage points: changes in
    /// functions that hold a sliver of the time are not regressions worth failing a build for.
    pub min_points: f64,
}

impl Default for TestOptions {
    fn default() -> Self {
        TestOptions {
            threshold: 10.0,
            alpha: 0.01,
            min_samples: 20,
            min_points: 1.0,
        }
    }
}

/// The range of `--threshold` (percent): a share growing past 100 times is already "new".
pub const THRESHOLD_RANGE: std::ops::RangeInclusive<f64> = 0.0..=10_000.0;
/// The range of `--min-points` (percentage points of a share).
pub const MIN_POINTS_RANGE: std::ops::RangeInclusive<f64> = 0.0..=100.0;

fn parse_number(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{s} is not a finite number"))
    }
}

fn parse_in(s: &str, range: &std::ops::RangeInclusive<f64>) -> Result<f64, String> {
    let v = parse_number(s)?;
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{s} is outside {} to {}",
            range.start(),
            range.end()
        ))
    }
}

/// Parses `--threshold`: a finite percentage in [`THRESHOLD_RANGE`]. NaN, which every
/// comparison is false against, would switch the regression check off.
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    parse_in(s, &THRESHOLD_RANGE)
}

/// Parses `--min-points`: finite, in [`MIN_POINTS_RANGE`].
pub fn parse_min_points(s: &str) -> Result<f64, String> {
    parse_in(s, &MIN_POINTS_RANGE)
}

/// Parses `--alpha`: a significance level strictly between 0 and 1 (at 0 nothing is ever
/// significant, at 1 or NaN the test means nothing).
pub fn parse_alpha(s: &str) -> Result<f64, String> {
    let v = parse_number(s)?;
    if v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        Err(format!("{s} is not strictly between 0 and 1"))
    }
}

/// Standard normal upper tail, P(Z > z), via the complementary error function.
pub fn normal_upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// erfc with a relative error below 1.2e-7 everywhere (Numerical Recipes' erfcc, Chebyshev).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Compares per-name counts of two runs.
pub fn compare(base: &[(String, u64)], new: &[(String, u64)], opts: &TestOptions) -> Vec<Change> {
    use std::collections::BTreeMap;
    let mut names: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (n, c) in base {
        names.entry(n).or_default().0 += c;
    }
    for (n, c) in new {
        names.entry(n).or_default().1 += c;
    }
    let total_base: u64 = base.iter().map(|(_, c)| c).sum();
    let total_new: u64 = new.iter().map(|(_, c)| c).sum();
    let tested = names
        .values()
        .filter(|(b, n)| b + n >= opts.min_samples)
        .count()
        .max(1);
    let per_test_alpha = opts.alpha / tested as f64;
    let share = crate::text::percent;
    let mut rows: Vec<Change> = names
        .into_iter()
        .map(|(name, (b, n))| {
            let (p1, p2) = (share(b, total_base), share(n, total_new));
            let relative = if p1 > 0.0 {
                100.0 * (p2 / p1 - 1.0)
            } else if p2 > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            let is_tested = b + n >= opts.min_samples && total_base > 0 && total_new > 0;
            let p_value = if is_tested {
                p_value(b, total_base, n, total_new)
            } else {
                1.0
            };
            Change {
                name: name.to_string(),
                base: b,
                new: n,
                base_share: p1,
                new_share: p2,
                relative,
                p_value,
                tested: is_tested,
                regression: is_tested
                    && relative > opts.threshold
                    && p2 - p1 >= opts.min_points
                    && p_value < per_test_alpha,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.regression.cmp(&a.regression))
            .then(b.relative.total_cmp(&a.relative))
            .then(a.name.cmp(&b.name))
    });
    rows
}

/// One-sided p-value for "share n/nt is larger than b/bt" (pooled two-proportion z-test).
fn p_value(b: u64, bt: u64, n: u64, nt: u64) -> f64 {
    let (b, bt, n, nt) = (b as f64, bt as f64, n as f64, nt as f64);
    let pooled = (b + n) / (bt + nt);
    let se = (pooled * (1.0 - pooled) * (1.0 / bt + 1.0 / nt)).sqrt();
    if se == 0.0 {
        return if n / nt > b / bt { 0.0 } else { 1.0 };
    }
    normal_upper_tail((n / nt - b / bt) / se)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|(n, c)| ((*n).to_string(), *c)).collect()
    }

    /// Regression: `--threshold nan`, `inf` and `--alpha 0`, `2`, `nan` were accepted and
    /// switched the regression check off.
    #[test]
    fn options_out_of_range_are_refused() {
        for bad in ["nan", "NaN", "inf", "-inf", "-1", "10001", "1e400", "x", ""] {
            assert!(parse_threshold(bad).is_err(), "--threshold {bad}");
        }
        for bad in ["nan", "inf", "-0.5", "101"] {
            assert!(parse_min_points(bad).is_err(), "--min-points {bad}");
        }
        for bad in ["nan", "inf", "0", "-0", "1", "2", "-0.01"] {
            assert!(parse_alpha(bad).is_err(), "--alpha {bad}");
        }
        assert_eq!(parse_threshold("10"), Ok(10.0));
        assert_eq!(parse_threshold("0"), Ok(0.0));
        assert_eq!(parse_min_points("8"), Ok(8.0));
        assert_eq!(parse_alpha("0.01"), Ok(0.01));
        assert_eq!(
            parse_alpha("2").unwrap_err(),
            "2 is not strictly between 0 and 1"
        );
        assert_eq!(
            parse_threshold("nan").unwrap_err(),
            "nan is not a finite number"
        );
        assert_eq!(
            parse_threshold("20000").unwrap_err(),
            "20000 is outside 0 to 10000"
        );
    }

    #[test]
    fn normal_tail_known_values() {
        assert!((normal_upper_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_upper_tail(1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_upper_tail(-1.644_854) - 0.95).abs() < 1e-6);
        assert!(normal_upper_tail(10.0) < 1e-20);
    }

    #[test]
    fn a_function_made_20_percent_slower_is_flagged() {
        // Costs 1:2:4, then f2 20% slower: shares 14.3/28.6/57.1 -> 13.5/32.4/54.1.
        let base = runs(&[("f1", 2857), ("f2", 5714), ("f4", 11429)]);
        let new = runs(&[("f1", 2703), ("f2", 6486), ("f4", 10811)]);
        let rows = compare(&base, &new, &TestOptions::default());
        let flagged: Vec<_> = rows
            .iter()
            .filter(|r| r.regression)
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(flagged, ["f2"]);
    }

    #[test]
    fn binomial_noise_is_not_flagged() {
        let base = runs(&[("f1", 290), ("f2", 560), ("f4", 1150)]);
        let new = runs(&[("f1", 280), ("f2", 585), ("f4", 1135)]);
        assert!(compare(&base, &new, &TestOptions::default())
            .iter()
            .all(|r| !r.regression));
    }

    #[test]
    fn a_sliver_of_time_growing_is_not_a_regression() {
        // 0.1% -> 0.9% of the samples: significant, +800%, but under one percentage point.
        let base = runs(&[("big", 9990), ("small", 10)]);
        let new = runs(&[("big", 9910), ("small", 90)]);
        let rows = compare(&base, &new, &TestOptions::default());
        let small = rows.iter().find(|r| r.name == "small").unwrap();
        assert!(small.p_value < 1e-6 && !small.regression);
    }

    #[test]
    fn small_and_new_symbols() {
        let base = runs(&[("a", 1000)]);
        let new = runs(&[("a", 900), ("b", 100), ("c", 3)]);
        let rows = compare(&base, &new, &TestOptions::default());
        let b = rows.iter().find(|r| r.name == "b").unwrap();
        assert!(b.regression && b.relative.is_infinite());
        let c = rows.iter().find(|r| r.name == "c").unwrap();
        assert!(!c.tested && !c.regression);
    }
}
