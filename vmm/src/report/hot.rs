//! The hottest buckets and functions of a profile object's counts, straight from the VMM's
//! results (what `hvprof run` prints; the files of [`super::write_all`] use [`super::text`]).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::profile::Bucket;
use super::Symbols;
use crate::profiler::ObjectResult;

/// A function's share of an object's samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionTotal {
    /// Symbol name, or the bucket address when none covers it.
    pub name: String,
    /// Samples counted in buckets that start inside the function.
    pub count: u64,
}

/// The `n` buckets with the most counts, hottest first (ties by address).
pub fn hottest_buckets(result: &ObjectResult, n: usize) -> Vec<Bucket> {
    let shift = result.config.bucket_size;
    let mut buckets: Vec<Bucket> = result
        .counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(i, c)| {
            let start = result.config.base.saturating_add((i as u64) << shift);
            let end = start.saturating_add(1u64 << shift).min(result.config.end());
            Bucket {
                start,
                end,
                count: u64::from(*c),
            }
        })
        .collect();
    buckets.sort_by(|a, b| b.count.cmp(&a.count).then(a.start.cmp(&b.start)));
    buckets.truncate(n);
    buckets
}

/// Counts per function (by the symbol at each bucket's start), largest first.
pub fn function_totals(result: &ObjectResult, symbols: &Symbols) -> Vec<FunctionTotal> {
    let shift = result.config.bucket_size;
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for (i, c) in result.counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let addr = result.config.base.saturating_add((i as u64) << shift);
        let name = symbols
            .lookup(addr)
            .map_or_else(|| format!("{addr:#x}"), |(s, _)| s.name.clone());
        *totals.entry(name).or_default() += u64::from(*c);
    }
    let mut v: Vec<FunctionTotal> = totals
        .into_iter()
        .map(|(name, count)| FunctionTotal { name, count })
        .collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    v
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        // Counts stay far below 2^52, where the conversion is exact.
        100.0 * part as f64 / whole as f64
    }
}

/// A text report of every object that counted samples: per-function totals, then the hottest
/// buckets. Objects that counted nothing are summarised in one line.
pub fn text_report(results: &[ObjectResult], symbols: &Symbols, top: usize) -> String {
    let mut out = String::new();
    let empty = results.iter().filter(|r| r.total() == 0).count();
    for r in results.iter().filter(|r| r.total() > 0) {
        let total = r.total();
        let scope = match r.config.process {
            Some(key) => format!("process CR3 {key:#x}"),
            None => "all processes".to_string(),
        };
        let _ = writeln!(
            out,
            "profile object {}: {:#x}..{:#x}, {}-byte buckets, {scope}, {total} samples",
            r.object.0,
            r.config.base,
            r.config.end(),
            1u64 << r.config.bucket_size
        );
        let _ = writeln!(out, "  {:>9} {:>7}  function", "samples", "share");
        for f in function_totals(r, symbols).iter().take(top) {
            let _ = writeln!(
                out,
                "  {:>9} {:>6.2}%  {}",
                f.count,
                percent(f.count, total),
                f.name
            );
        }
        let _ = writeln!(out, "  {:>9} {:>7}  hottest buckets", "samples", "share");
        for b in hottest_buckets(r, top) {
            let share = percent(b.count, total);
            let _ = writeln!(
                out,
                "  {:>9} {:>6.2}%  {:#x}..{:#x} {}",
                b.count,
                share,
                b.start,
                b.end,
                symbols.describe(b.start)
            );
        }
    }
    if empty > 0 {
        let _ = writeln!(out, "{empty} profile objects counted no samples");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile_core::object::ObjectConfig;
    use profile_core::ObjectId;

    fn result(counts: Vec<u32>) -> ObjectResult {
        let config = ObjectConfig {
            process: None,
            base: 0x1000,
            size: 0x100,
            bucket_size: 4,
            buffer: 0,
            buffer_size: 64,
            source: profile_core::ProfileSource::TIME,
            affinity: profile_core::affinity::ProcessorSet::all_active(2),
        };
        ObjectResult {
            object: ObjectId(1),
            config,
            counts,
        }
    }

    #[test]
    fn hottest_first_with_addresses() {
        let mut counts = vec![0; 16];
        counts[2] = 5;
        counts[7] = 9;
        counts[9] = 5;
        let b = hottest_buckets(&result(counts), 2);
        assert_eq!(
            b,
            vec![
                Bucket {
                    start: 0x1070,
                    end: 0x1080,
                    count: 9
                },
                Bucket {
                    start: 0x1020,
                    end: 0x1030,
                    count: 5
                }
            ]
        );
    }

    #[test]
    fn unsymbolized_buckets_are_named_by_address() {
        let mut counts = vec![0; 16];
        counts[1] = 3;
        let f = function_totals(&result(counts), &Symbols::default());
        assert_eq!(
            f,
            vec![FunctionTotal {
                name: "0x1010".into(),
                count: 3
            }]
        );
    }
}
