//! The guest's processes and threads in a profile: looking rows up by key, and an object's
//! samples per thread, per process (split between user and kernel mode) and per function of
//! one process. Every output reads them through here: report.txt's tables, pprof's labels,
//! the flame graphs' process frames, compare's per-process rows.
//!
//! Everything works from an object's per-thread counts (`ProfileObject::threads`), so it does
//! for objects without call stacks; an object without per-thread counts (a guest agent's, a
//! profile older than format 4, a run that named no thread) has no process rows.

use std::collections::BTreeMap;

pub use crate::profile::ProcessSamples;
use crate::profile::{
    FunctionCount, FunctionTotals, ProcessInfo, Profile, ProfileObject, ThreadInfo,
};
use crate::symbols::Symbols;

/// A profile's process and thread tables, by key.
#[derive(Debug, Clone, Default)]
pub struct Tasks<'a> {
    processes: BTreeMap<u32, &'a ProcessInfo>,
    threads: BTreeMap<u32, &'a ThreadInfo>,
}

impl<'a> Tasks<'a> {
    /// The tables of `p`.
    pub fn new(p: &'a Profile) -> Self {
        Tasks {
            processes: p.processes.iter().map(|r| (r.key, r)).collect(),
            threads: p.threads.iter().map(|t| (t.key, t)).collect(),
        }
    }

    /// True when the profile lists no process.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// The process of key `key`.
    pub fn process(&self, key: u32) -> Option<&'a ProcessInfo> {
        self.processes.get(&key).copied()
    }

    /// The thread of key `key`.
    pub fn thread(&self, key: u32) -> Option<&'a ThreadInfo> {
        self.threads.get(&key).copied()
    }

    /// The process thread `thread` ran in.
    pub fn process_of(&self, thread: u32) -> Option<&'a ProcessInfo> {
        self.thread(thread).and_then(|t| self.process(t.process))
    }
}

/// True for an address in the upper (kernel) half: bit 63 set.
pub fn is_kernel_address(address: u64) -> bool {
    address >> 63 == 1
}

/// `o`'s samples per thread, most first (ties by key); threads without samples left out.
pub fn thread_samples(o: &ProfileObject) -> Vec<(u32, u64)> {
    let mut by: BTreeMap<u32, u64> = BTreeMap::new();
    for t in &o.threads {
        // A checked profile's per-thread counts add up to the object's total.
        let n: u64 = t.counts.iter().map(|(_, c)| *c).sum();
        *by.entry(t.thread).or_default() += n;
    }
    let mut v: Vec<(u32, u64)> = by.into_iter().filter(|(_, n)| *n > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// `o`'s samples per process, most first (ties by key). Threads not in `tasks` are left out.
pub fn process_samples(tasks: &Tasks, o: &ProfileObject) -> Vec<ProcessSamples> {
    let mut by: BTreeMap<u32, ProcessSamples> = BTreeMap::new();
    for t in &o.threads {
        let Some(p) = tasks.process_of(t.thread) else {
            continue;
        };
        let row = by.entry(p.key).or_insert(ProcessSamples {
            process: p.key,
            samples: 0,
            user: 0,
            kernel: 0,
        });
        for &(index, count) in &t.counts {
            let (start, _) = o.bucket_range(index);
            row.samples += count;
            if is_kernel_address(start) {
                row.kernel += count;
            } else {
                row.user += count;
            }
        }
    }
    let mut v: Vec<ProcessSamples> = by.into_values().filter(|r| r.samples > 0).collect();
    v.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.process.cmp(&b.process)));
    v
}

/// A list of `o`'s counts (the object's, or one thread's) as (samples, user, kernel): user
/// and kernel by the bucket's start address. None when a sum passes 2^64-1 (a checked
/// profile's never do: they add up to at most the object's total).
pub fn split(o: &ProfileObject, counts: &[(u64, u64)]) -> Option<(u64, u64, u64)> {
    let (mut user, mut kernel) = (0u64, 0u64);
    for &(index, count) in counts {
        let (start, _) = o.bucket_range(index);
        let half = if is_kernel_address(start) {
            &mut kernel
        } else {
            &mut user
        };
        *half = half.checked_add(count)?;
    }
    Some((user.checked_add(kernel)?, user, kernel))
}

/// Fills in every object's totals from its per-thread counts: each thread's `samples`,
/// `user` and `kernel`, and the object's `processes` (what [`process_samples`] gives), so
/// that profile.json answers "which process, which thread" without a script adding up
/// buckets. The JSON writer calls it, so a file hvprof writes always has them, fresh.
pub fn add_totals(p: &mut Profile) {
    let per_object: Vec<Vec<ProcessSamples>> = {
        let tasks = Tasks::new(p);
        p.objects
            .iter()
            .map(|o| {
                if o.threads.is_empty() {
                    Vec::new()
                } else {
                    process_samples(&tasks, o)
                }
            })
            .collect()
    };
    for (o, processes) in p.objects.iter_mut().zip(per_object) {
        let totals: Vec<_> = o.threads.iter().map(|t| split(o, &t.counts)).collect();
        for (t, total) in o.threads.iter_mut().zip(totals) {
            (t.samples, t.user, t.kernel) = match total {
                Some((samples, user, kernel)) => (Some(samples), Some(user), Some(kernel)),
                None => (None, None, None),
            };
        }
        o.processes = processes;
    }
}

/// The buckets of `o` that threads of process `process` counted: index -> samples.
pub fn process_buckets(tasks: &Tasks, o: &ProfileObject, process: u32) -> BTreeMap<u64, u64> {
    let mut out: BTreeMap<u64, u64> = BTreeMap::new();
    for t in &o.threads {
        if tasks.process_of(t.thread).map(|p| p.key) != Some(process) {
            continue;
        }
        for &(index, count) in &t.counts {
            *out.entry(index).or_default() += count;
        }
    }
    out
}

/// Per-function totals of `buckets` (index -> samples) of `o` in the process with key
/// `process` (its mapped files' symbols too), named by `symbols` as
/// [`ProfileObject::function_counts`] names them; largest first.
pub fn function_counts(
    o: &ProfileObject,
    buckets: &BTreeMap<u64, u64>,
    symbols: &Symbols,
    process: Option<u32>,
) -> Vec<FunctionCount> {
    let mut totals = FunctionTotals::new();
    for (&index, &count) in buckets {
        let (start, _) = o.bucket_range(index);
        let key = match symbols.resolve_in(process, start) {
            Some(hit) => (Some(hit.module.name.clone()), hit.function()),
            None => (None, format!("{start:#x}")),
        };
        *totals.entry(key).or_default() += count;
    }
    FunctionCount::ranked(totals)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::hex::{Hex, OptHex};
    use crate::profile::{ObjectOwner, StackCount, ThreadCounts};

    /// A kernel-half address no symbol covers.
    pub(crate) const KERNEL_PC: u64 = 0xffff_ffff_8100_0000;

    /// A whole-space host profile of 100 samples in three processes and five threads, with
    /// call stacks and per-thread counts, for every output's tests. Symbols:
    /// [`crate::profile::tests::call_site_symbols`] (`caller` 0x1040, `next` 0x1050, `hot`
    /// 0x1070).
    ///
    /// | thread | process | 0x1020 | caller 0x1040 | hot 0x1070 | kernel | total |
    /// | --- | --- | --- | --- | --- | --- | --- |
    /// | 20 `awk` (tid 57) | 10 awk (pid 57) | | | 40 | 10 | 50 |
    /// | 21 `worker` (tid 60) | 10 awk | | 20 | | | 20 |
    /// | 22 `seq` (tid 58) | 11 seq (pid 58) | | | 15 | 5 | 20 |
    /// | 23 unnamed (tid 61) | 11 seq | 6 | | | | 6 |
    /// | 24 (no tid) | 12 `[cr3 0x5000]` | | 4 | | | 4 |
    pub(crate) fn tasks_profile() -> crate::Profile {
        let mut p = crate::profile::tests::sample_profile(0);
        let k = KERNEL_PC >> 4;
        let process = |key, pid: Option<u64>, name: &str, cr3| ProcessInfo {
            key,
            pid,
            name: name.into(),
            path: pid.map(|_| format!("/usr/bin/{name}")),
            cr3s: vec![Hex(cr3)],
            first_seen_s: 0.25,
            last_seen_s: 1.0,
            kernel: false,
            identified: pid.is_some(),
            mappings: Vec::new(),
        };
        p.processes = vec![
            process(10, Some(57), "awk", 0x3000),
            process(11, Some(58), "seq", 0x4000),
            process(12, None, "[cr3 0x5000]", 0x5000),
        ];
        let thread = |key, process, tid: Option<u64>, name: Option<&str>| ThreadInfo {
            key,
            process,
            tid,
            name: name.map(str::to_string),
        };
        p.threads = vec![
            thread(20, 10, Some(57), Some("awk")),
            thread(21, 10, Some(60), Some("worker")),
            thread(22, 11, Some(58), Some("seq")),
            thread(23, 11, Some(61), None),
            thread(24, 12, None, None),
        ];
        let per = |thread, counts: &[(u64, u64)]| ThreadCounts {
            thread,
            samples: None,
            user: None,
            kernel: None,
            counts: counts.to_vec(),
        };
        let stack = |pcs: &[u64], count, thread| StackCount {
            thread: Some(thread),
            ..StackCount::new(pcs.iter().copied(), false, count)
        };
        p.objects[0] = crate::ProfileObject {
            id: 1,
            owner: ObjectOwner::Host,
            process: OptHex(None),
            base: Hex(0),
            size: Hex(u64::MAX),
            bucket_shift: 4,
            affinity: vec![0, 1],
            buckets: 1 << 60,
            total: 100,
            counts: vec![(0x102, 6), (0x104, 24), (0x107, 55), (k, 15)],
            functions: Vec::new(),
            stacks: vec![
                stack(&[0x1074, 0x1050], 30, 20),
                stack(&[0x1044], 20, 21),
                stack(&[0x1074, 0x1050], 10, 22),
            ],
            stacks_dropped: 5,
            threads: vec![
                per(20, &[(0x107, 40), (k, 10)]),
                per(21, &[(0x104, 20)]),
                per(22, &[(0x107, 15), (k, 5)]),
                per(23, &[(0x102, 6)]),
                per(24, &[(0x104, 4)]),
            ],
            ..p.objects[0].clone()
        };
        p
    }

    #[test]
    fn samples_per_thread_and_per_process_with_the_kernel_split() {
        let p = tasks_profile();
        crate::validate::check(&p).unwrap();
        let tasks = Tasks::new(&p);
        let o = &p.objects[0];
        assert_eq!(
            thread_samples(o),
            [(20, 50), (21, 20), (22, 20), (23, 6), (24, 4)]
        );
        let rows: Vec<(u32, u64, u64, u64)> = process_samples(&tasks, o)
            .iter()
            .map(|r| (r.process, r.samples, r.user, r.kernel))
            .collect();
        assert_eq!(rows, [(10, 70, 60, 10), (11, 26, 21, 5), (12, 4, 4, 0)]);
        assert_eq!(tasks.process_of(23).unwrap().name, "seq");
        assert!(tasks.process_of(99).is_none());
    }

    #[test]
    fn functions_of_one_process_from_its_threads_counts() {
        let p = tasks_profile();
        let tasks = Tasks::new(&p);
        let o = &p.objects[0];
        let symbols = crate::profile::tests::call_site_symbols();
        let f: Vec<(String, u64)> =
            function_counts(o, &process_buckets(&tasks, o, 10), &symbols, Some(10))
                .iter()
                .map(|f| (f.qualified(), f.samples))
                .collect();
        assert_eq!(
            f,
            [
                ("m!hot".to_string(), 40),
                ("m!caller".to_string(), 20),
                ("0xffffffff81000000".to_string(), 10)
            ]
        );
    }

    /// A guest names its processes and threads: control characters, `;` and markup in them
    /// reach no output raw (report.txt, the folded stacks' frames).
    #[test]
    fn hostile_process_and_thread_names_stay_inert() {
        let mut p = tasks_profile();
        p.processes[0].name = "a;b\x1b[31m\n</g>".into();
        p.threads[0].name = Some("t\x07\r".into());
        crate::validate::check(&p).unwrap();
        let symbols = crate::profile::tests::call_site_symbols();
        let text = crate::text::render(&p, &symbols, 20);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(
            text.contains("Functions in a;b\u{fffd}[31m\u{fffd}</g> (pid 57)"),
            "{text}"
        );
        for line in crate::flame::folded(&p, &symbols) {
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        let first = &crate::flame::folded(&p, &symbols)[0];
        assert!(first.starts_with("object 1 (all processes);a:b"), "{first}");
    }
}
