//! A static stabbing-query structure over half-open ranges `[start, end)`: given a point, yield
//! every range that contains it in O(log n + k). The index of started objects keeps one per
//! table (see [`super`]).
//!
//! The range endpoints cut the address space into elementary segments; a binary search finds
//! the segment holding the point. Two layouts answer from there:
//!
//! * **Flat**: each segment lists every range covering it (compressed rows). One lookup, then
//!   exactly the k answers: the fast path. Its size is the total coverage, which is about n for
//!   mostly disjoint ranges but can grow as n² for deeply nested ones.
//! * **Tree**: a segment tree over the segments; each range is stored at the O(log n) canonical
//!   nodes that cover it and a query walks from the leaf to the root. Size O(n log n) whatever
//!   the ranges, so a guest cannot make the VMM allocate n² memory.
//!
//! [`Stab::build`] picks Flat unless its coverage exceeds `FLAT_BUDGET_FACTOR x n +
//! FLAT_BUDGET_SLACK`.

use alloc::vec;
use alloc::vec::Vec;

/// Flat is used while total coverage <= this x ranges + [`FLAT_BUDGET_SLACK`].
const FLAT_BUDGET_FACTOR: usize = 8;
/// See [`FLAT_BUDGET_FACTOR`].
const FLAT_BUDGET_SLACK: usize = 1024;

/// The built structure; members are indexes into the slice given to [`Stab::build`].
#[derive(Clone, Default, Debug)]
pub(crate) struct Stab {
    bounds: Vec<u64>,
    offsets: Vec<u32>,
    members: Vec<u32>,
    /// 0 for Flat; for Tree, the number of leaves (a power of two).
    tree_leaves: usize,
}

fn to_u32(x: usize) -> u32 {
    // Bounded: at most 8192 x 2048 ranges and O(n log n) tree entries, far below 2^32.
    u32::try_from(x).expect("stab index sizes fit in u32")
}

impl Stab {
    /// Builds over `ranges` (`[start, end)`; empty ranges never match and are left out), Flat
    /// within the memory budget, else Tree.
    pub(crate) fn build(ranges: &[(u64, u64)]) -> Stab {
        Self::build_as(ranges, None)
    }

    /// [`Stab::build`], or with `flat` the layout forced (tests of both layouts).
    fn build_as(ranges: &[(u64, u64)], flat: Option<bool>) -> Stab {
        let mut bounds: Vec<u64> = Vec::with_capacity(ranges.len() * 2);
        for &(s, e) in ranges {
            if s < e {
                bounds.push(s);
                bounds.push(e);
            }
        }
        bounds.sort_unstable();
        bounds.dedup();
        let seg = |x: u64| bounds.partition_point(|&b| b < x);
        let spans: Vec<(usize, usize, u32)> = ranges
            .iter()
            .enumerate()
            .filter(|(_, &(s, e))| s < e)
            .map(|(i, &(s, e))| (seg(s), seg(e), to_u32(i)))
            .collect();
        let coverage: usize = spans.iter().map(|&(l, r, _)| r - l).sum();
        let budget = FLAT_BUDGET_FACTOR * spans.len() + FLAT_BUDGET_SLACK;
        if flat.unwrap_or(coverage <= budget) {
            Self::build_flat(bounds, &spans, coverage)
        } else {
            Self::build_tree(bounds, &spans)
        }
    }

    fn build_flat(bounds: Vec<u64>, spans: &[(usize, usize, u32)], coverage: usize) -> Stab {
        let m = bounds.len();
        let mut diff = vec![0i64; m + 1];
        for &(l, r, _) in spans {
            diff[l] += 1;
            diff[r] -= 1;
        }
        let mut offsets = Vec::with_capacity(m + 1);
        let (mut depth, mut total) = (0i64, 0usize);
        for d in diff.iter().take(m) {
            offsets.push(to_u32(total));
            depth += d;
            total += usize::try_from(depth).unwrap_or(0);
        }
        offsets.push(to_u32(total));
        debug_assert_eq!(total, coverage);
        let mut cursor: Vec<usize> = offsets.iter().map(|&o| o as usize).collect();
        let mut members = vec![0u32; total];
        for &(l, r, idx) in spans {
            for c in &mut cursor[l..r] {
                members[*c] = idx;
                *c += 1;
            }
        }
        Stab {
            bounds,
            offsets,
            members,
            tree_leaves: 0,
        }
    }

    fn build_tree(bounds: Vec<u64>, spans: &[(usize, usize, u32)]) -> Stab {
        let leaves = bounds.len().max(1).next_power_of_two();
        let mut counts = vec![0usize; 2 * leaves + 1];
        for &(l, r, _) in spans {
            canonical_nodes(leaves, l, r, |node| counts[node] += 1);
        }
        let mut offsets = Vec::with_capacity(2 * leaves + 1);
        let mut total = 0usize;
        for c in counts.iter().take(2 * leaves) {
            offsets.push(to_u32(total));
            total += c;
        }
        offsets.push(to_u32(total));
        let mut cursor: Vec<usize> = offsets.iter().map(|&o| o as usize).collect();
        let mut members = vec![0u32; total];
        for &(l, r, idx) in spans {
            canonical_nodes(leaves, l, r, |node| {
                members[cursor[node]] = idx;
                cursor[node] += 1;
            });
        }
        Stab {
            bounds,
            offsets,
            members,
            tree_leaves: leaves,
        }
    }

    /// Calls `f` with the index of every range containing `pc` (each exactly once).
    #[inline]
    pub(crate) fn query<F: FnMut(u32)>(&self, pc: u64, mut f: F) {
        let i = self.bounds.partition_point(|&b| b <= pc);
        if i == 0 {
            return;
        }
        let seg = i - 1;
        if self.tree_leaves == 0 {
            let (a, b) = (self.offsets[seg] as usize, self.offsets[seg + 1] as usize);
            for &m in &self.members[a..b] {
                f(m);
            }
        } else {
            let mut node = self.tree_leaves + seg;
            while node > 0 {
                let (a, b) = (self.offsets[node] as usize, self.offsets[node + 1] as usize);
                for &m in &self.members[a..b] {
                    f(m);
                }
                node >>= 1;
            }
        }
    }
}

/// The canonical segment-tree nodes covering leaves `[l, r)`.
fn canonical_nodes<F: FnMut(usize)>(leaves: usize, l: usize, r: usize, mut f: F) {
    let (mut l, mut r) = (l + leaves, r + leaves);
    while l < r {
        if l & 1 == 1 {
            f(l);
            l += 1;
        }
        if r & 1 == 1 {
            r -= 1;
            f(r);
        }
        l >>= 1;
        r >>= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Each layout forced, and the automatic choice.
    const LAYOUTS: [Option<bool>; 3] = [Some(true), Some(false), None];

    fn hits(stab: &Stab, pc: u64) -> Vec<u32> {
        let mut v = Vec::new();
        stab.query(pc, |i| v.push(i));
        v.sort_unstable();
        v
    }

    #[test]
    fn both_layouts_answer_nested_and_adjacent_ranges() {
        let ranges = [
            (10, 20),
            (0, 100),
            (20, 30),
            (15, 16),
            (50, 50),
            (0, u64::MAX),
        ];
        for layout in LAYOUTS {
            let stab = Stab::build_as(&ranges, layout);
            assert_eq!(hits(&stab, 15), vec![0, 1, 3, 5]);
            assert_eq!(hits(&stab, 20), vec![1, 2, 5]);
            assert_eq!(hits(&stab, 50), vec![1, 5]);
            assert_eq!(hits(&stab, 100), vec![5]);
            assert_eq!(hits(&stab, u64::MAX), Vec::<u32>::new());
        }
    }

    #[test]
    fn deep_nesting_builds_a_tree_of_n_log_n_entries() {
        let ranges: Vec<(u64, u64)> = (0..2000u64).map(|i| (i, 10_000 - i)).collect();
        let stab = Stab::build(&ranges);
        assert!(stab.tree_leaves != 0, "Flat would store 2000 x 2000 / 2");
        assert!(stab.members.len() < 2 * 2000 * 13);
        assert_eq!(hits(&stab, 5000).len(), 2000);
        assert_eq!(hits(&stab, 0), vec![0]);
    }

    proptest! {
        #[test]
        fn stab_matches_brute_force(
            ranges in proptest::collection::vec((0u64..200, 0u64..200), 0..60),
            pcs in proptest::collection::vec(0u64..210, 1..30),
        ) {
            let ranges: Vec<(u64, u64)> =
                ranges.into_iter().map(|(a, b)| (a.min(b), a.max(b))).collect();
            for layout in LAYOUTS {
                let stab = Stab::build_as(&ranges, layout);
                for &pc in &pcs {
                    let want: Vec<u32> = (0u32..)
                        .zip(&ranges)
                        .filter(|(_, &(s, e))| s <= pc && pc < e)
                        .map(|(i, _)| i)
                        .collect();
                    prop_assert_eq!(hits(&stab, pc), want);
                }
            }
        }
    }
}
