//! Counts since an earlier read, for clients that poll a running profile (`hvprof top`): every
//! read of a host profile returns a token naming the counts it saw, and a read with
//! `?since=TOKEN` answers with what grew since then, per bucket and per guest thread, instead
//! of every count again.
//!
//! The API thread keeps the last [`KEPT`] reads of each profile (their counts, copied as a
//! plain read copies them), so the work and memory are the API's: the vCPUs count as they
//! always do. A token that is no longer kept (or never was) answers with every count, from
//! zero, and says so (`since` 0): a client that falls behind starts over rather than missing
//! samples.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::profiler::host_profiles::SparseCounts;

/// Reads kept per profile.
pub const KEPT: usize = 4;

/// One read of a profile: the counts a token names.
struct Read {
    token: u64,
    counts: SparseCounts,
    threads: BTreeMap<u32, SparseCounts>,
}

/// The kept reads of every profile read so far.
#[derive(Default)]
pub struct Reads {
    last_token: u64,
    kept: HashMap<u32, VecDeque<Read>>,
}

/// What grew between two reads of a profile.
#[derive(Debug, PartialEq, Eq)]
pub struct Grown {
    /// This read's token.
    pub token: u64,
    /// The token the counts grew from; 0 when they are counted from zero.
    pub since: u64,
    /// Bucket index -> samples added, nonzero only.
    pub buckets: Vec<(u64, u64)>,
    /// Guest thread row -> its buckets' samples added, threads with some only.
    pub threads: Vec<(u32, Vec<(u64, u64)>)>,
}

impl Reads {
    /// Records a read of profile `id` (its counts now) and returns what grew since the read
    /// `since` names, or since zero when it names none of this profile's kept reads.
    pub fn read(
        &mut self,
        id: u32,
        since: Option<u64>,
        counts: SparseCounts,
        threads: BTreeMap<u32, SparseCounts>,
    ) -> Grown {
        self.last_token += 1;
        let token = self.last_token;
        let kept = self.kept.entry(id).or_default();
        let before = since.and_then(|t| kept.iter().find(|r| r.token == t));
        let empty = SparseCounts::new();
        let grown = Grown {
            token,
            since: before.map_or(0, |r| r.token),
            buckets: grown(&counts, before.map(|r| &r.counts)),
            threads: threads
                .iter()
                .map(|(&row, now)| {
                    let then = before.map(|r| r.threads.get(&row).unwrap_or(&empty));
                    (row, grown(now, then))
                })
                .filter(|(_, b)| !b.is_empty())
                .collect(),
        };
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(Read {
            token,
            counts,
            threads,
        });
        grown
    }
}

/// `now - then` per bucket, where it is above zero (a profile's counts only grow).
fn grown(now: &SparseCounts, then: Option<&SparseCounts>) -> Vec<(u64, u64)> {
    now.iter()
        .filter_map(|(&b, &n)| {
            let before = then.and_then(|t| t.get(&b)).copied().unwrap_or(0);
            let added = n.saturating_sub(before);
            (added > 0).then_some((b, added))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(u64, u64)]) -> SparseCounts {
        pairs.iter().copied().collect()
    }

    #[test]
    fn a_read_since_an_earlier_one_gives_what_grew_per_bucket_and_thread() {
        let mut reads = Reads::default();
        let first = reads.read(
            1,
            None,
            counts(&[(1, 5), (2, 3)]),
            [(7, counts(&[(1, 5), (2, 3)]))].into(),
        );
        assert_eq!((first.since, first.buckets.len()), (0, 2), "from zero");
        let threads = [(7, counts(&[(1, 5), (2, 4)])), (9, counts(&[(3, 2)]))];
        let second = reads.read(
            1,
            Some(first.token),
            counts(&[(1, 5), (2, 4), (3, 2)]),
            threads.into(),
        );
        assert_eq!(
            second,
            Grown {
                token: first.token + 1,
                since: first.token,
                buckets: vec![(2, 1), (3, 2)],
                threads: vec![(7, vec![(2, 1)]), (9, vec![(3, 2)])],
            }
        );
    }

    #[test]
    fn a_token_no_longer_kept_or_of_another_profile_counts_from_zero() {
        let mut reads = Reads::default();
        let of_two = reads
            .read(2, None, counts(&[(1, 1)]), BTreeMap::new())
            .token;
        let first = reads
            .read(1, None, counts(&[(1, 1)]), BTreeMap::new())
            .token;
        let g = reads.read(1, Some(of_two), counts(&[(1, 2)]), BTreeMap::new());
        assert_eq!((g.since, g.buckets.clone()), (0, vec![(1, 2)]));
        for _ in 0..KEPT {
            reads.read(1, None, counts(&[(1, 2)]), BTreeMap::new());
        }
        let g = reads.read(1, Some(first), counts(&[(1, 3)]), BTreeMap::new());
        assert_eq!(g.since, 0, "the oldest read is dropped after {KEPT} more");
        let kept = reads.kept[&1].len();
        assert_eq!(kept, KEPT, "never more than {KEPT} reads a profile");
    }
}
