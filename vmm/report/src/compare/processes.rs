//! The guest's processes in `hvprof compare` and `hvprof merge`.
//!
//! Compare matches processes **by name**: pids and keys differ between runs, and a workload's
//! programs keep their names. Processes of one name in one run (two `awk`s) are summed into
//! one row. Where both objects have per-thread counts, the function rows are keyed by
//! (process, module, function), `awk: m!hot`, so a function that grew in one program is not
//! hidden by the same function shrinking in another; where either has none (a profile older
//! than format 4, a guest agent's object), processes are "not recorded" on that side and the
//! rows are as before.
//!
//! Merge keeps every run's processes apart (a process of one run is not one of another, even
//! under the same name and pid): each profile's tables are renumbered to keys that follow the
//! previous profiles', and its per-thread counts and stacks with them.

use std::collections::BTreeMap;

use crate::processes::{self, Tasks};
use crate::profile::{Profile, ProfileObject};
use crate::symbols::Symbols;

/// (name, samples) rows.
pub type Rows = Vec<(String, u64)>;

/// `o`'s samples per process name (same-named processes summed), or None when `o` has no
/// per-thread counts: its processes were not recorded.
pub fn process_rows(tasks: &Tasks, o: &ProfileObject) -> Option<Rows> {
    if o.threads.is_empty() {
        return None;
    }
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for r in processes::process_samples(tasks, o) {
        if let Some(p) = tasks.process(r.process) {
            *by_name.entry(p.name.clone()).or_default() += r.samples;
        }
    }
    Some(by_name.into_iter().collect())
}

/// `o`'s function rows keyed by process name: `NAME: module!function` named by `symbols`, or
/// with `symbols` None, `NAME: start..end` per bucket (so both sides name rows alike).
/// Threads of one process name are gathered first, in one pass over the threads.
pub fn process_function_rows(tasks: &Tasks, o: &ProfileObject, symbols: Option<&Symbols>) -> Rows {
    // By name, then by process key: each process sees its own mapped files.
    let mut by_name: BTreeMap<&str, BTreeMap<u32, BTreeMap<u64, u64>>> = BTreeMap::new();
    for t in &o.threads {
        let Some(p) = tasks.process_of(t.thread) else {
            continue;
        };
        let buckets = by_name
            .entry(p.name.as_str())
            .or_default()
            .entry(p.key)
            .or_default();
        for &(index, count) in &t.counts {
            // A checked profile's per-thread counts add up to the object's total.
            *buckets.entry(index).or_default() += count;
        }
    }
    let mut rows = Rows::new();
    for (name, by_key) in by_name {
        let mut named: BTreeMap<String, u64> = BTreeMap::new();
        for (key, buckets) in by_key {
            match symbols {
                Some(s) => {
                    for f in processes::function_counts(o, &buckets, s, Some(key)) {
                        *named.entry(f.qualified()).or_default() += f.samples;
                    }
                }
                None => {
                    for (index, count) in buckets {
                        let (start, end) = o.bucket_range(index);
                        *named.entry(format!("{start:#x}..{end:#x}")).or_default() += count;
                    }
                }
            }
        }
        rows.extend(named.into_iter().map(|(f, n)| (format!("{name}: {f}"), n)));
    }
    rows
}

/// Keys ran out while renumbering: the tables together have more than 2^32-1 rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the {0} table's keys pass 2^32-1")]
pub struct KeysExhausted(pub &'static str);

/// Renumbers `p`'s process keys to `processes..` and thread keys to `threads..` (in table
/// order), with every reference to them (threads' processes, objects' per-thread counts,
/// stacks); returns the next free keys.
pub fn renumber(
    p: &mut Profile,
    processes: u32,
    threads: u32,
) -> Result<(u32, u32), KeysExhausted> {
    let overflow = KeysExhausted;
    let mut process_key: BTreeMap<u32, u32> = BTreeMap::new();
    let mut next_process = processes;
    for r in &mut p.processes {
        process_key.insert(r.key, next_process);
        r.key = next_process;
        next_process = next_process
            .checked_add(1)
            .ok_or_else(|| overflow("process"))?;
    }
    let mut thread_key: BTreeMap<u32, u32> = BTreeMap::new();
    let mut next_thread = threads;
    for t in &mut p.threads {
        thread_key.insert(t.key, next_thread);
        t.key = next_thread;
        // A checked profile's threads all name a listed process.
        t.process = process_key.get(&t.process).copied().unwrap_or(t.process);
        next_thread = next_thread
            .checked_add(1)
            .ok_or_else(|| overflow("thread"))?;
    }
    for o in &mut p.objects {
        for t in &mut o.threads {
            t.thread = thread_key.get(&t.thread).copied().unwrap_or(t.thread);
        }
        for s in &mut o.processes {
            s.process = process_key.get(&s.process).copied().unwrap_or(s.process);
        }
        for s in &mut o.stacks {
            s.thread = s.thread.map(|k| thread_key.get(&k).copied().unwrap_or(k));
        }
    }
    Ok((next_process, next_thread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processes::tests::tasks_profile;

    #[test]
    fn processes_are_rows_by_name_and_functions_by_process() {
        let mut p = tasks_profile();
        // A second `awk` (another pid) in the same run is summed with the first.
        p.processes[1].name = "awk".into();
        let tasks = Tasks::new(&p);
        let o = &p.objects[0];
        assert_eq!(
            process_rows(&tasks, o).unwrap(),
            [("[cr3 0x5000]".to_string(), 4), ("awk".to_string(), 96)]
        );
        let symbols = crate::profile::tests::call_site_symbols();
        let rows = process_function_rows(&tasks, o, Some(&symbols));
        assert!(rows.contains(&("awk: m!hot".to_string(), 55)), "{rows:?}");
        assert!(
            rows.contains(&("[cr3 0x5000]: m!caller".to_string(), 4)),
            "{rows:?}"
        );
        let rows = process_function_rows(&tasks, o, None);
        assert!(
            rows.contains(&("awk: 0x1070..0x1080".to_string(), 55)),
            "{rows:?}"
        );
        let mut none = p.objects[0].clone();
        none.threads.clear();
        assert_eq!(process_rows(&tasks, &none), None);
    }

    #[test]
    fn renumbering_moves_every_reference() {
        let mut p = tasks_profile();
        assert_eq!(renumber(&mut p, 3, 100).unwrap(), (6, 105));
        let keys: Vec<u32> = p.processes.iter().map(|r| r.key).collect();
        assert_eq!(keys, [3, 4, 5]);
        let threads: Vec<(u32, u32)> = p.threads.iter().map(|t| (t.key, t.process)).collect();
        assert_eq!(threads, [(100, 3), (101, 3), (102, 4), (103, 4), (104, 5)]);
        let o = &p.objects[0];
        let per: Vec<u32> = o.threads.iter().map(|t| t.thread).collect();
        assert_eq!(per, [100, 101, 102, 103, 104]);
        let stacks: Vec<Option<u32>> = o.stacks.iter().map(|s| s.thread).collect();
        assert_eq!(stacks, [Some(100), Some(101), Some(102)]);
        crate::validate::check(&p).unwrap();
        assert_eq!(
            renumber(&mut tasks_profile(), u32::MAX - 1, 0),
            Err(KeysExhausted("process"))
        );
    }

    /// `tasks_profile` scaled up for the test to have power: every count times `k`.
    fn scaled(k: u64) -> Profile {
        let mut p = tasks_profile();
        let o = &mut p.objects[0];
        o.counts.iter_mut().for_each(|c| c.1 *= k);
        o.total *= k;
        for t in &mut o.threads {
            t.counts.iter_mut().for_each(|c| c.1 *= k);
        }
        o.stacks.clear();
        o.stacks_dropped = 0;
        p
    }

    /// Moves `n` of awk's samples in `hot` (thread 20, bucket 0x107) to seq (thread 22).
    fn shift_to_seq(p: &mut Profile, n: u64) {
        let o = &mut p.objects[0];
        o.threads[0].counts[0].1 -= n;
        o.threads[2].counts[0].1 += n;
    }

    #[test]
    fn a_process_that_grew_is_a_regression_whatever_its_pid() {
        use crate::compare::{compare_profiles, Scope, TestOptions};
        let symbols = crate::profile::tests::call_site_symbols();
        let base = scaled(100);
        let mut new = scaled(100);
        // Another boot: other pids and keys, same names.
        new.processes[0].pid = Some(1057);
        new.processes[1].pid = Some(1058);
        renumber(&mut new, 40, 80).unwrap();
        shift_to_seq(&mut new, 1500);
        crate::validate::check(&new).unwrap();
        let (objects, _) = compare_profiles(
            &base,
            &new,
            &TestOptions::default(),
            Scope::All,
            [&symbols, &symbols],
        );
        let o = &objects[0];
        assert_eq!(o.processes_recorded, [true, true]);
        let row = |rows: &[crate::compare::Change], name: &str| {
            let r = rows.iter().find(|c| c.name == name).unwrap();
            (r.base, r.new, r.regression)
        };
        assert_eq!(row(&o.processes, "seq"), (2600, 4100, true));
        assert_eq!(row(&o.processes, "awk"), (7000, 5500, false));
        // Unsymbolized profiles: functions by process and bucket; `hot` itself did not move,
        // seq's share of it did.
        assert_eq!(row(&o.functions, "seq: 0x1070..0x1080"), (1500, 3000, true));
        assert_eq!(
            row(&o.functions, "awk: 0x1070..0x1080"),
            (4000, 2500, false)
        );
        assert_eq!(o.regressions(), 2);
        // Symbolized: functions by process, named.
        let (mut base, mut new) = (base, new);
        base.symbolize(&symbols);
        new.symbolize(&symbols);
        let (objects, _) = compare_profiles(
            &base,
            &new,
            &TestOptions::default(),
            Scope::All,
            [&symbols, &symbols],
        );
        assert_eq!(row(&objects[0].functions, "seq: m!hot"), (1500, 3000, true));
    }

    #[test]
    fn a_format_3_side_has_its_processes_not_recorded() {
        use crate::compare::{compare_profiles, Scope, TestOptions};
        let symbols = crate::profile::tests::call_site_symbols();
        let mut old = scaled(100);
        old.processes.clear();
        old.threads.clear();
        old.objects[0].threads.clear();
        let new = scaled(100);
        let (objects, _) = compare_profiles(
            &old,
            &new,
            &TestOptions::default(),
            Scope::All,
            [&symbols, &symbols],
        );
        let o = &objects[0];
        assert_eq!(o.processes_recorded, [false, true]);
        assert!(o.processes.is_empty());
        // Today's rows: buckets, unprefixed (neither profile is symbolized).
        assert!(
            o.functions.iter().all(|c| c.name.starts_with("0x")),
            "{:?}",
            o.functions
        );
        assert_eq!(o.regressions(), 0);
    }

    #[test]
    fn merging_renumbers_and_unions_the_tables() {
        use crate::compare::merge_profiles;
        use crate::profile::SampledBy;
        let mut a = tasks_profile();
        let by = |kernel, kick| Some(SampledBy { kernel, kick });
        let total = a.objects[0].total;
        a.objects[0].sampled_by = by(total - 1, 1);
        let mut b = tasks_profile();
        b.run.start_time = "2023-11-14T22:20:00.000Z".into();
        b.processes[0].pid = Some(1057);
        b.objects[0].sampled_by = by(0, total);
        let m = merge_profiles(vec![a.clone(), b.clone()]).unwrap();
        crate::validate::check(&m).unwrap();
        // How the samples were taken adds up, where both runs say.
        assert_eq!(m.objects[0].sampled_by, by(total - 1, total + 1));
        b.objects[0].sampled_by = None;
        let unknown = merge_profiles(vec![a, b]).unwrap();
        assert_eq!(unknown.objects[0].sampled_by, None);
        let processes: Vec<(u32, String)> =
            m.processes.iter().map(|p| (p.key, p.label())).collect();
        assert_eq!(
            processes,
            [
                (0, "awk (pid 57)".into()),
                (1, "seq (pid 58)".into()),
                (2, "[cr3 0x5000]".into()),
                (3, "awk (pid 1057)".into()),
                (4, "seq (pid 58)".into()),
                (5, "[cr3 0x5000]".into()),
            ]
        );
        let threads: Vec<(u32, u32)> = m.threads.iter().map(|t| (t.key, t.process)).collect();
        assert_eq!(
            threads,
            [
                (0, 0),
                (1, 0),
                (2, 1),
                (3, 1),
                (4, 2),
                (5, 3),
                (6, 3),
                (7, 4),
                (8, 4),
                (9, 5)
            ]
        );
        let o = &m.objects[0];
        assert_eq!(o.total, 200);
        let per: Vec<u32> = o.threads.iter().map(|t| t.thread).collect();
        assert_eq!(per, (0..10).collect::<Vec<u32>>());
        // The same stack of two runs' threads stays two stacks.
        let stacks: Vec<(u64, Option<u32>)> =
            o.stacks.iter().map(|s| (s.count, s.thread)).collect();
        assert_eq!(
            stacks,
            [
                (30, Some(0)),
                (30, Some(5)),
                (20, Some(1)),
                (20, Some(6)),
                (10, Some(2)),
                (10, Some(7))
            ]
        );
        let tasks = Tasks::new(&m);
        let rows = process_rows(&tasks, o).unwrap();
        assert_eq!(rows[1], ("awk".to_string(), 140));
        // With a run whose object has no per-thread counts, the merged object has none.
        let mut c = tasks_profile();
        c.run.start_time = "2023-11-14T22:30:00.000Z".into();
        c.objects[0].threads.clear();
        let m = merge_profiles(vec![tasks_profile(), c]).unwrap();
        assert!(m.objects[0].threads.is_empty());
        assert_eq!(m.processes.len(), 6);
        crate::validate::check(&m).unwrap();
    }
}
