//! The short table printed after a run: the hottest buckets.

use crate::result_file::Header;

/// The `top` hottest buckets: address, offset in the range, count and share of all samples.
pub fn table(h: &Header, counts: &[u32], top: usize) -> String {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let mut hot: Vec<(usize, u32)> = counts
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, c)| c != 0)
        .collect();
    hot.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut out = format!(
        "{} ({:#x}..{:#x}), {}-byte buckets, {} samples in {} ms\n",
        h.module,
        h.base,
        h.base.saturating_add(h.size),
        1u64 << h.bucket_shift,
        total,
        h.duration_ms
    );
    if hot.is_empty() {
        out.push_str("no samples fell in the range\n");
        return out;
    }
    out.push_str(&format!(
        "{:>18}  {:>12}  {:>10}  {:>6}\n",
        "address", "offset", "count", "share"
    ));
    for &(i, c) in hot.iter().take(top) {
        let offset = (i as u64) << h.bucket_shift;
        // Tenths of a percent in integers: no float formatting differences across hosts.
        let permille = u64::from(c) * 1000 / total;
        out.push_str(&format!(
            "{:#18x}  {:>#12x}  {:>10}  {:>3}.{}%\n",
            h.base.wrapping_add(offset),
            offset,
            c,
            permille / 10,
            permille % 10
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            module: "x.sys".into(),
            process_id: 0,
            base: 0x1000,
            size: 0x40,
            bucket_shift: 4,
            source: 0,
            interval: 1000,
            duration_ms: 5,
        }
    }

    #[test]
    fn hottest_first_with_shares() {
        let t = table(&header(), &[1, 0, 3, 0], 10);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "x.sys (0x1000..0x1040), 16-byte buckets, 4 samples in 5 ms"
        );
        assert!(
            lines[2].contains("0x1020") && lines[2].contains("75.0%"),
            "{}",
            t
        );
        assert!(
            lines[3].contains("0x1000") && lines[3].contains("25.0%"),
            "{}",
            t
        );
        assert_eq!(lines.len(), 4);
        assert_eq!(table(&header(), &[1, 0, 3, 0], 1).lines().count(), 3);
    }

    #[test]
    fn no_samples() {
        assert!(table(&header(), &[0, 0], 10).contains("no samples"));
    }
}
