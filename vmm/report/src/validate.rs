//! The consistency check every profile read from a file passes before anything uses it
//! (`hvprof report`, `compare` and `merge` alike, through [`crate::json::read`]): JSON syntax
//! and types are serde's job; this is the part a type cannot say. A file is hostile input: a
//! count of 2^64-1, an index past `buckets` or a total that is not the sum of its counts would
//! otherwise reach the reports as nonsense shares, or overflow a sum.
//!
//! The rules (docs/profile-json.md, "Consistency"), each checked on every object:
//! - `size` is nonzero (hvprof exports no empty range with counts), `base + size` is at most
//!   2^64, `bucket_shift` at most 63;
//! - `counts` indices are strictly increasing (sorted, unique), below `buckets`, and each
//!   bucket starts inside `base..base+size`; every count is at least 1;
//! - `total` is the sum of the counts, and that sum fits 64 bits;
//! - `functions`, when present, add up to `total`; `stacks` plus `stacks_dropped` add up to at
//!   most `total` (a sample whose stack could not be walked has none);
//! - per-thread counts (`threads`), when present, list each thread once, each list follows
//!   the rules of `counts`, and together they are exactly `counts`; no thread's stacks count
//!   more samples than its counts;
//! - process and thread keys are unique, each thread's process is listed, and every thread an
//!   object's per-thread counts or stacks name is listed; processes' times are finite and not
//!   negative;
//! - the totals written for scripts, when present, are what they summarize: a thread's
//!   `samples`, `user` and `kernel` (given all three or none) its counts' sum and its user-
//!   and kernel-half buckets'; an object's `processes` name each process with samples in its
//!   per-thread counts once, with the sums of its threads (one listed without samples there
//!   has 0);
//! - `run.wall_time_s` is finite and not negative (a merge adds them up);
//! - every module's and guest module's `base + size` is at most 2^64;
//! - all objects' totals together are at most 2^63-1, so that any output may add them up
//!   (a flame graph stacks every object; inferno's differential graph subtracts counts as
//!   signed 64-bit numbers), and so may a comparison of two profiles.
//!
//! Counts are any 64-bit value: a real run's counts are far smaller (a guest object's counters
//! are 32-bit, a host profile's one per sample), but merged profiles add up, and every sum here
//! is checked rather than trusted.

use std::collections::{BTreeMap, BTreeSet};

use crate::profile::{Profile, ProfileObject};
use introspect::os::linux::build_id::MAX_BUILD_ID;

mod totals;

/// A profile that is well-formed JSON but not self-consistent: where (`objects[2].counts`)
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {problem}")]
pub struct Inconsistent {
    /// The JSON path of the offending field.
    pub at: String,
    /// What is wrong with it.
    pub problem: String,
}

fn bad(at: impl Into<String>, problem: impl Into<String>) -> Inconsistent {
    Inconsistent {
        at: at.into(),
        problem: problem.into(),
    }
}

/// Sum of `values`, or None past 2^64-1.
fn checked_sum(values: impl IntoIterator<Item = u64>) -> Option<u64> {
    values.into_iter().try_fold(0u64, u64::checked_add)
}

/// Checks `range` (`base`, `size`) ends at most at 2^64.
fn range_fits(at: &str, base: u64, size: u64) -> Result<(), Inconsistent> {
    if u128::from(base) + u128::from(size) > 1u128 << 64 {
        return Err(bad(
            at,
            format!("base {base:#x} + size {size:#x} passes the end of the 64-bit address space"),
        ));
    }
    Ok(())
}

/// Checks a sparse count list of `o` (its `counts`, or one thread's): indices strictly
/// increase, are below `buckets` and start inside the range; no count is 0.
fn check_indices(
    at_counts: &str,
    o: &ProfileObject,
    counts: &[(u64, u64)],
) -> Result<(), Inconsistent> {
    let mut previous: Option<u64> = None;
    for (n, &(index, count)) in counts.iter().enumerate() {
        if index >= o.buckets {
            return Err(bad(
                at_counts,
                format!("bucket index {index:#x} past buckets {:#x}", o.buckets),
            ));
        }
        // The bucket's offset in the range, exact in 128 bits.
        if u128::from(index) << o.bucket_shift >= u128::from(o.size.0) {
            return Err(bad(
                at_counts,
                format!(
                    "bucket index {index:#x} starts past the range's size {:#x}",
                    o.size.0
                ),
            ));
        }
        if let Some(p) = previous.filter(|p| *p >= index) {
            let what = if p == index { "repeats" } else { "comes after" };
            return Err(bad(
                at_counts,
                format!("bucket index {index:#x} (entry {n}) {what} {p:#x}: indices must increase"),
            ));
        }
        if count == 0 {
            return Err(bad(
                at_counts,
                format!("bucket index {index:#x} has count 0: only nonzero buckets are listed"),
            ));
        }
        previous = Some(index);
    }
    Ok(())
}

/// Checks `o`'s per-thread counts among themselves: one entry per thread, each a valid count
/// list, together exactly the object's counts. (That their threads exist is [`check`]'s.)
fn check_thread_counts(at: &str, o: &ProfileObject) -> Result<(), Inconsistent> {
    if o.threads.is_empty() {
        return Ok(());
    }
    let mut seen = BTreeSet::new();
    let mut sums: BTreeMap<u64, u64> = BTreeMap::new();
    for (n, t) in o.threads.iter().enumerate() {
        let at_t = format!("{at}.threads[{n}]");
        if !seen.insert(t.thread) {
            return Err(bad(
                format!("{at_t}.thread"),
                format!("thread {} is listed twice", t.thread),
            ));
        }
        check_indices(&format!("{at_t}.counts"), o, &t.counts)?;
        for &(index, count) in &t.counts {
            let e = sums.entry(index).or_default();
            *e = e
                .checked_add(count)
                .ok_or_else(|| bad(format!("{at_t}.counts"), "the counts add up past 2^64-1"))?;
        }
    }
    let ours: BTreeMap<u64, u64> = o.counts.iter().copied().collect();
    let differs = ours
        .keys()
        .chain(sums.keys())
        .copied()
        .filter(|i| ours.get(i) != sums.get(i))
        .min();
    if let Some(i) = differs {
        return Err(bad(
            format!("{at}.threads"),
            format!(
                "bucket {i:#x}: the threads' counts add up to {}, the object's count is {}",
                sums.get(&i).copied().unwrap_or(0),
                ours.get(&i).copied().unwrap_or(0)
            ),
        ));
    }
    Ok(())
}

/// Checks one object; `at` is its path (`objects[2]`).
pub fn check_object(at: &str, o: &ProfileObject) -> Result<(), Inconsistent> {
    if o.bucket_shift > 63 {
        return Err(bad(
            format!("{at}.bucket_shift"),
            format!(
                "{} is not a shift of a 64-bit address (0 to 63)",
                o.bucket_shift
            ),
        ));
    }
    range_fits(&format!("{at}.size"), o.base.0, o.size.0)?;
    if o.size.0 == 0 && !o.counts.is_empty() {
        return Err(bad(format!("{at}.size"), "0, yet the object has counts"));
    }
    let at_counts = format!("{at}.counts");
    check_indices(&at_counts, o, &o.counts)?;
    let Some(sum) = checked_sum(o.counts.iter().map(|(_, c)| *c)) else {
        return Err(bad(at_counts, "the counts add up past 2^64-1"));
    };
    if sum != o.total {
        return Err(bad(
            format!("{at}.total"),
            format!("{} is not the sum of the counts, {sum}", o.total),
        ));
    }
    if let Some(by) = o.sampled_by {
        if by.kernel.checked_add(by.kick) != Some(o.total) {
            return Err(bad(
                format!("{at}.sampled_by"),
                format!(
                    "kernel {} and kick {} do not add up to the total {}",
                    by.kernel, by.kick, o.total
                ),
            ));
        }
    }
    if !o.functions.is_empty() {
        match checked_sum(o.functions.iter().map(|f| f.samples)) {
            Some(f) if f == o.total => {}
            Some(f) => {
                return Err(bad(
                    format!("{at}.functions"),
                    format!("their samples add up to {f}, not the total {}", o.total),
                ))
            }
            None => return Err(bad(format!("{at}.functions"), "samples add up past 2^64-1")),
        }
    }
    let stacks =
        checked_sum(o.stacks.iter().map(|s| s.count)).and_then(|s| s.checked_add(o.stacks_dropped));
    match stacks {
        Some(s) if s <= o.total => {}
        _ => {
            return Err(bad(
                format!("{at}.stacks"),
                format!(
                    "their counts and stacks_dropped add up to more than the total {}",
                    o.total
                ),
            ))
        }
    }
    if let Some(n) = o.stacks.iter().position(|s| s.pcs.is_empty()) {
        return Err(bad(format!("{at}.stacks[{n}].pcs"), "empty"));
    }
    check_thread_counts(at, o)
}

/// Checks the process and thread tables: unique keys, every thread's process listed, times
/// finite and not negative. Returns the thread keys.
fn check_tables(p: &Profile) -> Result<BTreeSet<u32>, Inconsistent> {
    let mut processes = BTreeSet::new();
    for (n, r) in p.processes.iter().enumerate() {
        if !processes.insert(r.key) {
            return Err(bad(
                format!("processes[{n}].key"),
                format!("{} is the key of an earlier process", r.key),
            ));
        }
        for (field, t) in [
            ("first_seen_s", r.first_seen_s),
            ("last_seen_s", r.last_seen_s),
        ] {
            if !(t.is_finite() && t >= 0.0) {
                return Err(bad(
                    format!("processes[{n}].{field}"),
                    format!("{t} is not a finite number of seconds"),
                ));
            }
        }
        let mut after = 0;
        for (m, map) in r.mappings.iter().enumerate() {
            if map.start.0 >= map.end.0 || map.start.0 < after {
                return Err(bad(
                    format!("processes[{n}].mappings[{m}]"),
                    format!(
                        "{:#x}..{:#x} is empty or not after the mapping before it",
                        map.start.0, map.end.0
                    ),
                ));
            }
            after = map.end.0;
            if let Some(id) = &map.build_id {
                let hex = id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                if id.is_empty() || id.len() > 2 * MAX_BUILD_ID || id.len() % 2 != 0 || !hex {
                    return Err(bad(
                        format!("processes[{n}].mappings[{m}].build_id"),
                        format!(
                            "not 1 to {MAX_BUILD_ID} bytes in lowercase hex: {:?}",
                            crate::sanitize::terminal(id)
                        ),
                    ));
                }
            }
        }
    }
    let mut threads = BTreeSet::new();
    for (n, t) in p.threads.iter().enumerate() {
        if !threads.insert(t.key) {
            return Err(bad(
                format!("threads[{n}].key"),
                format!("{} is the key of an earlier thread", t.key),
            ));
        }
        if !processes.contains(&t.process) {
            return Err(bad(
                format!("threads[{n}].process"),
                format!("{} is no process's key", t.process),
            ));
        }
    }
    Ok(threads)
}

/// Checks that `o`'s threads (per-thread counts, stacks) are in the thread table (`known`,
/// its keys), and that no thread's stacks count more samples than the thread's counts.
fn check_object_threads(
    known: &BTreeSet<u32>,
    at: &str,
    o: &ProfileObject,
) -> Result<(), Inconsistent> {
    // Per thread: samples in its counts. Each fits: they add up to the object's counts.
    let mut counted: BTreeMap<u32, u64> = BTreeMap::new();
    for (n, t) in o.threads.iter().enumerate() {
        if !known.contains(&t.thread) {
            return Err(bad(
                format!("{at}.threads[{n}].thread"),
                format!("{} is no thread's key", t.thread),
            ));
        }
        counted.insert(t.thread, t.counts.iter().map(|(_, c)| *c).sum());
    }
    let mut stacked: BTreeMap<u32, u64> = BTreeMap::new();
    for (n, s) in o.stacks.iter().enumerate() {
        let Some(k) = s.thread else { continue };
        if !known.contains(&k) {
            return Err(bad(
                format!("{at}.stacks[{n}].thread"),
                format!("{k} is no thread's key"),
            ));
        }
        // No overflow: the stacks' counts together were checked to fit the total.
        *stacked.entry(k).or_default() += s.count;
    }
    if o.threads.is_empty() {
        return Ok(());
    }
    for (k, n) in stacked {
        let counted = counted.get(&k).copied().unwrap_or(0);
        if n > counted {
            return Err(bad(
                format!("{at}.stacks"),
                format!("thread {k}'s stacks count {n} samples, its counts {counted}"),
            ));
        }
    }
    Ok(())
}

/// Checks a whole profile (its format name and version are [`crate::json::read`]'s).
pub fn check(p: &Profile) -> Result<(), Inconsistent> {
    let wall = p.run.wall_time_s;
    // JSON has no infinity: one written would read back as null.
    if !(wall.is_finite() && wall >= 0.0) {
        return Err(bad(
            "run.wall_time_s",
            format!("{wall} is not a finite number of seconds"),
        ));
    }
    for (i, m) in p.modules.iter().enumerate() {
        range_fits(&format!("modules[{i}].size"), m.base.0, m.size.0)?;
    }
    for (i, m) in p.guest_modules.iter().enumerate() {
        range_fits(&format!("guest_modules[{i}].size"), m.base.0, m.size.0)?;
    }
    let threads = check_tables(p)?;
    let tasks = crate::processes::Tasks::new(p);
    for (i, o) in p.objects.iter().enumerate() {
        check_object(&format!("objects[{i}]"), o)?;
        check_object_threads(&threads, &format!("objects[{i}]"), o)?;
        totals::check(&tasks, &format!("objects[{i}]"), o)?;
    }
    match checked_sum(p.objects.iter().map(|o| o.total)) {
        Some(t) if t <= i64::MAX.unsigned_abs() => Ok(()),
        _ => Err(bad("objects", "their totals add up past 2^63-1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex::Hex;
    use crate::profile::tests::sample_profile;
    use crate::profile::{FunctionCount, StackCount};

    fn error(f: impl FnOnce(&mut ProfileObject)) -> String {
        let mut p = sample_profile(0x1000);
        f(&mut p.objects[0]);
        check(&p).unwrap_err().to_string()
    }

    #[test]
    fn a_consistent_profile_passes() {
        check(&sample_profile(0x1000)).unwrap();
        let mut p = sample_profile(0x1000);
        p.symbolize(&crate::profile::tests::call_site_symbols());
        check(&p).unwrap();
    }

    #[test]
    fn the_whole_address_space_passes() {
        // A whole-space host profile: 2^64 bytes saturate to size 2^64-1, 2^60 buckets.
        let mut p = sample_profile(0);
        let o = &mut p.objects[0];
        (o.size, o.buckets) = (Hex(u64::MAX), 1 << 60);
        o.counts = vec![(0, 1), (u64::MAX >> 4, u64::MAX - 1)];
        o.total = u64::MAX;
        // One object may count up to 2^64-1 (all of a profile's objects together, 2^63-1).
        check_object("objects[0]", &p.objects[0]).unwrap();
        // Starting higher, its range ends exactly at 2^64.
        let o = &mut p.objects[0];
        (o.base, o.size) = (Hex(0x1000), Hex(0u64.wrapping_sub(0x1000)));
        o.counts = vec![(0, 1)];
        o.total = 1;
        check(&p).unwrap();
    }

    #[test]
    fn mappings_must_be_ranges_in_address_order() {
        use crate::profile::MappingInfo;
        let mut p = crate::processes::tests::tasks_profile();
        let map = |start: u64, end: u64| MappingInfo {
            start: Hex(start),
            end: Hex(end),
            offset: Hex(0),
            path: "/bin/busybox".into(),
            build_id: None,
        };
        p.processes[0].mappings = vec![map(0x40_1000, 0x4a_0000), map(0x4a_0000, 0x4b_0000)];
        check(&p).unwrap();
        p.processes[0].mappings = vec![map(0x40_1000, 0x4a_0000), map(0x40_2000, 0x4b_0000)];
        let e = check(&p).unwrap_err().to_string();
        assert!(e.contains("processes[0].mappings[1]"), "{e}");
        p.processes[0].mappings = vec![map(0x40_1000, 0x40_1000)];
        let e = check(&p).unwrap_err().to_string();
        assert!(e.contains("processes[0].mappings[0]"), "{e}");
        let mut with_id = map(0x40_1000, 0x4a_0000);
        with_id.build_id = Some("0a1b".into());
        p.processes[0].mappings = vec![with_id.clone()];
        check(&p).unwrap();
        for bad_id in ["", "0A1B", "0a1", "0a1g", &"ab".repeat(MAX_BUILD_ID + 1)] {
            with_id.build_id = Some(bad_id.into());
            p.processes[0].mappings = vec![with_id.clone()];
            let e = check(&p).unwrap_err().to_string();
            assert!(e.contains("mappings[0].build_id"), "{bad_id:?}: {e}");
        }
    }

    #[test]
    fn each_inconsistency_is_named() {
        type Corruption = fn(&mut ProfileObject);
        let cases: [(&str, Corruption); 15] = [
            (
                "objects[0].sampled_by: kernel 10 and kick 4 do not add up to the total 15",
                |o| {
                    o.sampled_by = Some(crate::profile::SampledBy {
                        kernel: 10,
                        kick: 4,
                    })
                },
            ),
            (
                "objects[0].counts: bucket index 0x400 past buckets 0x10",
                |o| o.counts[2].0 = 0x400,
            ),
            (
                "objects[0].counts: bucket index 0x7 (entry 2) repeats 0x7",
                |o| o.counts[2].0 = 7,
            ),
            (
                "objects[0].counts: bucket index 0x1 (entry 1) comes after 0x2",
                |o| o.counts[1].0 = 1,
            ),
            ("objects[0].counts: bucket index 0x2 has count 0", |o| {
                o.counts[0].1 = 0
            }),
            ("objects[0].counts: the counts add up past 2^64-1", |o| {
                o.counts[0].1 = u64::MAX
            }),
            (
                "objects[0].total: 16 is not the sum of the counts, 15",
                |o| o.total = 16,
            ),
            ("objects[0].bucket_shift: 64 is not a shift", |o| {
                o.bucket_shift = 64
            }),
            ("objects[0].bucket_shift: 200 is not a shift", |o| {
                o.bucket_shift = 200
            }),
            ("objects[0].size: 0, yet the object has counts", |o| {
                o.size = Hex(0)
            }),
            (
                "objects[0].size: base 0x1000 + size 0xffffffffffffffff passes the end",
                |o| o.size = Hex(u64::MAX),
            ),
            (
                "objects[0].counts: bucket index 0x9 starts past the range's size 0x90",
                |o| o.size = Hex(0x90),
            ),
            (
                "objects[0].functions: their samples add up to 14, not the total 15",
                |o| {
                    o.functions = vec![FunctionCount {
                        module: None,
                        name: "f".into(),
                        samples: 14,
                    }]
                },
            ),
            (
                "objects[0].stacks: their counts and stacks_dropped add up to more",
                |o| {
                    o.stacks = vec![StackCount::new([1], false, 10)];
                    o.stacks_dropped = 6;
                },
            ),
            ("objects[0].stacks[0].pcs: empty", |o| {
                o.stacks = vec![StackCount::new([], false, 1)]
            }),
        ];
        for (expected, corrupt) in cases {
            let e = error(corrupt);
            assert!(
                e.starts_with(expected),
                "{e:?} does not start with {expected:?}"
            );
        }
    }

    #[test]
    fn each_process_and_thread_inconsistency_is_named() {
        use crate::profile::Profile;
        type Corruption = fn(&mut Profile);
        let cases: [(&str, Corruption); 10] = [
            (
                "processes[1].key: 10 is the key of an earlier process",
                |p| p.processes[1].key = 10,
            ),
            ("processes[0].last_seen_s: NaN is not a finite", |p| {
                p.processes[0].last_seen_s = f64::NAN
            }),
            ("threads[2].key: 20 is the key of an earlier thread", |p| {
                p.threads[2].key = 20
            }),
            ("threads[0].process: 99 is no process's key", |p| {
                p.threads[0].process = 99
            }),
            ("objects[0].threads[0].thread: 99 is no thread's key", |p| {
                p.threads.push(crate::profile::ThreadInfo {
                    key: 98,
                    ..p.threads[0].clone()
                });
                p.objects[0].threads[0].thread = 99;
            }),
            ("objects[0].stacks[1].thread: 99 is no thread's key", |p| {
                p.objects[0].stacks[1].thread = Some(99)
            }),
            (
                "objects[0].threads[1].thread: thread 20 is listed twice",
                |p| p.objects[0].threads[1].thread = 20,
            ),
            (
                "objects[0].threads: bucket 0x104: the threads' counts add up to 23, the \
                 object's count is 24",
                |p| p.objects[0].threads[4].counts[0].1 = 3,
            ),
            (
                "objects[0].threads[3].counts: bucket index 0x102 has count 0",
                |p| p.objects[0].threads[3].counts[0].1 = 0,
            ),
            (
                "objects[0].stacks: thread 21's stacks count 20 samples, its counts 19",
                |p| {
                    p.objects[0].threads[1].counts[0].1 = 19;
                    p.objects[0].threads[4].counts[0].1 = 5;
                },
            ),
        ];
        for (expected, corrupt) in cases {
            let mut p = crate::processes::tests::tasks_profile();
            corrupt(&mut p);
            let e = check(&p).unwrap_err().to_string();
            assert!(
                e.starts_with(expected),
                "{e:?} does not start with {expected:?}"
            );
        }
        // Stacks without a thread, and objects without per-thread counts, pass.
        let mut p = crate::processes::tests::tasks_profile();
        p.objects[0].threads.clear();
        p.objects[0].stacks[0].thread = None;
        check(&p).unwrap();
    }

    #[test]
    fn all_totals_together_fit_63_bits() {
        let mut p = sample_profile(0x1000);
        let o = &mut p.objects[0];
        o.counts = vec![(0, 1 << 62)];
        o.total = 1 << 62;
        p.objects.push(p.objects[0].clone());
        assert_eq!(
            check(&p).unwrap_err().to_string(),
            "objects: their totals add up past 2^63-1"
        );
        p.objects[1].counts[0].1 -= 1;
        p.objects[1].total -= 1;
        check(&p).unwrap();
    }

    #[test]
    fn the_wall_time_is_finite_and_not_negative() {
        let mut p = sample_profile(0x1000);
        for bad in [f64::INFINITY, f64::NAN, -1.0] {
            p.run.wall_time_s = bad;
            assert_eq!(check(&p).unwrap_err().at, "run.wall_time_s");
        }
    }

    #[test]
    fn modules_must_fit_the_address_space() {
        let mut p = sample_profile(0x1000);
        p.symbolize(&crate::profile::tests::call_site_symbols());
        p.modules[0].base = Hex(u64::MAX);
        let e = check(&p).unwrap_err();
        assert_eq!(e.at, "modules[0].size");
    }
}
