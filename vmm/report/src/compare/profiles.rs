//! Comparing and merging saved profiles (profile.json). Objects are matched across runs by
//! owner, id, range and bucket size (a guest agent creates its objects in the same order each
//! run; per-process keys are not compared, since CR3 values differ between boots).
//!
//! Objects with call stacks on both sides are also compared stack by stack (each stack named
//! by its functions, outermost first): a caller path that grew is a regression even when the
//! function at its leaf did not. The family-wise alpha is then split evenly between the
//! function tests and the stack tests (Bonferroni over both families).
//!
//! Objects with the guest's processes on both sides (per-thread counts) are also compared
//! process by process, matched by name, and their function rows are per process
//! ([`super::processes`]); the alpha is then split over that family too.

use std::collections::BTreeMap;

use super::processes::{process_function_rows, process_rows, renumber};
use super::significance::{compare, Change, TestOptions};
use crate::callers::named;
use crate::processes::Tasks;
use crate::profile::{FunctionTotals, RunInfo, SampledBy, StackCount};
use crate::symbols::Symbols;
use crate::{FunctionCount, ObjectOwner, Profile, ProfileObject};

/// The identity of an object across runs.
type ObjectKey = (ObjectOwner, u64, u64, u64, u32);

fn key(o: &ProfileObject) -> ObjectKey {
    (o.owner, o.id, o.base.0, o.size.0, o.bucket_shift)
}

/// A label for people: `guest object 1 (0x40000000..0x40001000)`.
pub fn label(o: &ProfileObject) -> String {
    let owner = match o.owner {
        ObjectOwner::Guest => "guest object",
        ObjectOwner::Host => "host profile",
    };
    format!("{owner} {} ({:#x}..{:#x})", o.id, o.base.0, o.end())
}

/// One object compared.
#[derive(Debug, Clone)]
pub struct ObjectComparison {
    /// Which object.
    pub label: String,
    /// Per-function changes (the verdict).
    pub functions: Vec<Change>,
    /// Per-bucket changes (detail).
    pub buckets: Vec<Change>,
    /// Whole-stack changes (empty unless both objects have call stacks).
    pub stacks: Vec<Change>,
    /// Per-process changes, processes matched by name (empty unless both objects recorded
    /// their processes).
    pub processes: Vec<Change>,
    /// Whether the base's and the new object's processes were recorded (per-thread counts,
    /// profile.json format 4): `[base, new]`.
    pub processes_recorded: [bool; 2],
}

impl ObjectComparison {
    /// Function-level, stack-level and process-level regressions.
    pub fn regressions(&self) -> usize {
        self.functions
            .iter()
            .chain(&self.stacks)
            .chain(&self.processes)
            .filter(|c| c.regression)
            .count()
    }
}

/// (stack name, samples) rows of an object's call stacks: frames outermost first, joined by
/// `;` as in a folded flame graph, named with `symbols` as each stack's process (from
/// `tasks`) sees them.
pub fn stack_rows(o: &ProfileObject, tasks: &Tasks, symbols: &Symbols) -> Vec<(String, u64)> {
    let mut rows: BTreeMap<String, u64> = BTreeMap::new();
    for s in named(o, tasks, symbols) {
        let mut frames: Vec<&str> = s.frames.iter().rev().map(String::as_str).collect();
        if s.truncated {
            frames.insert(0, "[truncated]");
        }
        *rows.entry(frames.join(";")).or_default() += s.count;
    }
    rows.into_iter().collect()
}

/// (name, samples) rows of one object.
type Rows = Vec<(String, u64)>;

/// Per-function rows of both objects, or per-bucket rows of both when either has no
/// symbols: names must mean the same thing on both sides (regression: a symbolized profile
/// compared with an unsymbolized one made every row look new).
fn function_rows(a: &ProfileObject, b: &ProfileObject) -> (Rows, Rows) {
    if a.functions.is_empty() || b.functions.is_empty() {
        return (bucket_rows(a), bucket_rows(b));
    }
    let rows = |o: &ProfileObject| -> Rows {
        o.functions
            .iter()
            .map(|f| (f.qualified(), f.samples))
            .collect()
    };
    (rows(a), rows(b))
}

fn bucket_rows(o: &ProfileObject) -> Vec<(String, u64)> {
    o.nonzero()
        .map(|b| (format!("{:#x}..{:#x}", b.start, b.end), b.count))
        .collect()
}

/// Which objects a comparison looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The guest agent's objects only.
    Guest,
    /// hvprof's host-side profiles only.
    Host,
    /// Both.
    All,
}

impl Scope {
    fn includes(self, owner: ObjectOwner) -> bool {
        match self {
            Scope::All => true,
            Scope::Guest => owner == ObjectOwner::Guest,
            Scope::Host => owner == ObjectOwner::Host,
        }
    }
}

/// Compares every object of `scope` present in both profiles; `symbols` name the base's and
/// the new profile's stack frames. Objects in only one are ignored (and reported by the
/// caller from `unmatched`).
pub fn compare_profiles(
    base: &Profile,
    new: &Profile,
    opts: &TestOptions,
    scope: Scope,
    symbols: [&Symbols; 2],
) -> (Vec<ObjectComparison>, Vec<String>) {
    let new_by_key: BTreeMap<ObjectKey, &ProfileObject> =
        new.objects.iter().map(|o| (key(o), o)).collect();
    let mut out = Vec::new();
    let mut unmatched = Vec::new();
    let tasks = [Tasks::new(base), Tasks::new(new)];
    for b in base.objects.iter().filter(|o| scope.includes(o.owner)) {
        match new_by_key.get(&key(b)) {
            Some(n) => {
                let recorded = [process_rows(&tasks[0], b), process_rows(&tasks[1], n)];
                let by_process = recorded[0].is_some() && recorded[1].is_some();
                let (base_rows, new_rows) = if by_process {
                    // Functions by process where both are symbolized and the symbols can
                    // name their buckets again, else buckets by process.
                    let named = !b.functions.is_empty()
                        && !n.functions.is_empty()
                        && symbols.iter().all(|s| !s.modules().is_empty());
                    (
                        process_function_rows(&tasks[0], b, named.then_some(symbols[0])),
                        process_function_rows(&tasks[1], n, named.then_some(symbols[1])),
                    )
                } else {
                    function_rows(b, n)
                };
                let with_stacks = !b.stacks.is_empty() && !n.stacks.is_empty();
                // Bonferroni over the families tested: functions, stacks, processes.
                let families = 1 + u32::from(with_stacks) + u32::from(by_process);
                let family = TestOptions {
                    alpha: opts.alpha / f64::from(families),
                    ..*opts
                };
                let stacks = if with_stacks {
                    let (bs, ns) = (
                        stack_rows(b, &tasks[0], symbols[0]),
                        stack_rows(n, &tasks[1], symbols[1]),
                    );
                    compare(&bs, &ns, &family)
                } else {
                    Vec::new()
                };
                let processes = match &recorded {
                    [Some(bp), Some(np)] => compare(bp, np, &family),
                    _ => Vec::new(),
                };
                out.push(ObjectComparison {
                    label: label(b),
                    functions: compare(&base_rows, &new_rows, &family),
                    buckets: compare(&bucket_rows(b), &bucket_rows(n), opts),
                    stacks,
                    processes,
                    processes_recorded: [recorded[0].is_some(), recorded[1].is_some()],
                });
            }
            None => unmatched.push(label(b)),
        }
    }
    (out, unmatched)
}

/// The run settings two profiles must share to be merged, and that a comparison warns about
/// when they differ: `(field, base value, other value)` for each that differs. The kernel is
/// compared by file name, so the same kernel at different paths (two hosts, two checkouts)
/// counts as the same.
pub fn run_differences(a: &RunInfo, b: &RunInfo) -> Vec<(&'static str, String, String)> {
    fn file_name(path: &str) -> &str {
        path.rsplit('/').next().unwrap_or(path)
    }
    let mut out = Vec::new();
    let mut differ = |field, x: String, y: String, same: bool| {
        if !same {
            out.push((field, x, y));
        }
    };
    differ(
        "run.kernel",
        a.kernel.clone(),
        b.kernel.clone(),
        file_name(&a.kernel) == file_name(&b.kernel),
    );
    differ(
        "run.cmdline",
        a.cmdline.clone(),
        b.cmdline.clone(),
        a.cmdline == b.cmdline,
    );
    differ(
        "run.protocol",
        a.protocol.clone(),
        b.protocol.clone(),
        a.protocol == b.protocol,
    );
    differ(
        "run.vcpus",
        a.vcpus.to_string(),
        b.vcpus.to_string(),
        a.vcpus == b.vcpus,
    );
    differ(
        "run.memory_mib",
        a.memory_mib.to_string(),
        b.memory_mib.to_string(),
        a.memory_mib == b.memory_mib,
    );
    differ(
        "run.clock",
        a.clock.clone(),
        b.clock.clone(),
        a.clock == b.clock,
    );
    out
}

/// Why profiles cannot be merged. The profiles are numbered from 1 in the order given.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no profiles to merge")]
    Empty,
    /// The same run given twice (its run metadata and per-vCPU counters are equal).
    #[error(
        "profile {again} is the same run as profile {first} (same start time, wall time and \
         per-vCPU counters): each run may be merged once"
    )]
    SameRun {
        /// The first time it was given.
        first: usize,
        /// The repeat.
        again: usize,
    },
    /// Runs of different workloads or machines: their sum would describe no run.
    #[error(
        "profile {other} is not a run of the same configuration as profile 1: {field} is {theirs:?}, not {ours:?}"
    )]
    Different {
        /// The profile that differs.
        other: usize,
        /// The first field that differs (`run.cmdline`).
        field: &'static str,
        /// Profile 1's value.
        ours: String,
        /// The other's.
        theirs: String,
    },
    /// The merged profile would not pass [`crate::validate`] (its objects' totals together
    /// pass 2^63-1).
    #[error("the merged profile is not consistent")]
    Inconsistent(#[source] crate::validate::Inconsistent),
    /// A sum passed 2^64-1.
    #[error("adding profile {other}: {what} passes 2^64-1")]
    Overflow {
        /// The profile being added.
        other: usize,
        /// Which sum (`objects[0].total`).
        what: String,
    },
    /// The profiles' process or thread tables together have more rows than keys.
    #[error("adding profile {other}")]
    Keys {
        /// The profile being added.
        other: usize,
        /// Which table ran out.
        #[source]
        source: super::processes::KeysExhausted,
    },
}

impl MergeError {
    /// The profile (numbered from 1) the error is about, if one.
    pub fn profile(&self) -> Option<usize> {
        match self {
            MergeError::Empty | MergeError::Inconsistent(_) => None,
            MergeError::SameRun { again: p, .. }
            | MergeError::Different { other: p, .. }
            | MergeError::Overflow { other: p, .. }
            | MergeError::Keys { other: p, .. } => Some(*p),
        }
    }
}

fn is_same_run(a: &Profile, b: &Profile) -> bool {
    a.run.start_time == b.run.start_time
        && a.run.wall_time_s.to_bits() == b.run.wall_time_s.to_bits()
        && a.run.kernel == b.run.kernel
        && a.run.cmdline == b.run.cmdline
        && a.vcpus == b.vcpus
}

/// `a + b`, or an overflow error naming the sum.
fn add(other: usize, what: impl Fn() -> String, a: u64, b: u64) -> Result<u64, MergeError> {
    a.checked_add(b).ok_or_else(|| MergeError::Overflow {
        other,
        what: what(),
    })
}

/// Merges runs (repetitions, or the same workload on several hosts) into one profile: the
/// counts of matching objects add up, per-vCPU counters add up, the run's wall time is the sum.
///
/// Refused: the same run twice (a repeated or copied file: [`MergeError::SameRun`]), runs of
/// another configuration than the first ([`run_differences`]: kernel file name, command line,
/// protocol, vCPUs, memory, clock), and sums past 2^64-1. Of the rest of the run metadata,
/// the start time is the earliest, the exit status the worst, and `kernel` and
/// `hvprof_version` list every distinct value (`a | b`) rather than keep the first run's.
///
/// The guest's processes and threads of every run are kept apart (a process of one run is
/// not one of another): each profile's keys are renumbered to follow the previous profiles'
/// ([`super::processes::renumber`]) and the tables concatenated. An object's per-thread
/// counts are kept only when every run's object has them (otherwise they would not add up to
/// its counts).
pub fn merge_profiles(mut profiles: Vec<Profile>) -> Result<Profile, MergeError> {
    for (j, b) in profiles.iter().enumerate() {
        if let Some(i) = profiles[..j].iter().position(|a| is_same_run(a, b)) {
            return Err(MergeError::SameRun {
                first: i + 1,
                again: j + 1,
            });
        }
        if let Some((field, ours, theirs)) =
            run_differences(&profiles[0].run, &b.run).into_iter().next()
        {
            return Err(MergeError::Different {
                other: j + 1,
                field,
                ours,
                theirs,
            });
        }
    }
    let mut next = (0, 0);
    for (i, p) in profiles.iter_mut().enumerate() {
        next = renumber(p, next.0, next.1).map_err(|source| MergeError::Keys {
            other: i + 1,
            source,
        })?;
    }
    let mut iter = profiles.into_iter();
    let mut merged = iter.next().ok_or(MergeError::Empty)?;
    // The runs' times do not line up: a merged profile has no timeline.
    merged.timelines.clear();
    let mut runs = 1;
    let list = |all: &str, one: &str| -> String {
        if all.split(" | ").any(|x| x == one) {
            all.to_string()
        } else {
            format!("{all} | {one}")
        }
    };
    for p in iter {
        runs += 1;
        merged.run.wall_time_s += p.run.wall_time_s;
        merged.run.start_time = merged.run.start_time.clone().min(p.run.start_time.clone());
        merged.run.exit_status = merged.run.exit_status.max(p.run.exit_status);
        merged.run.kernel = list(&merged.run.kernel, &p.run.kernel);
        merged.hvprof_version = list(&merged.hvprof_version, &p.hvprof_version);
        for v in p.vcpus {
            match merged.vcpus.iter_mut().find(|m| m.vcpu == v.vcpu) {
                Some(m) => {
                    let at = |f: &str| format!("vcpus[{}].{f}", v.vcpu);
                    m.samples = add(runs, || at("samples"), m.samples, v.samples)?;
                    m.attributed = add(runs, || at("attributed"), m.attributed, v.attributed)?;
                    m.outside = add(runs, || at("outside"), m.outside, v.outside)?;
                    m.lost = add(runs, || at("lost"), m.lost, v.lost)?;
                    m.counts = add(runs, || at("counts"), m.counts, v.counts)?;
                    m.injected = add(runs, || at("injected"), m.injected, v.injected)?;
                    m.hypercalls = add(runs, || at("hypercalls"), m.hypercalls, v.hypercalls)?;
                }
                None => merged.vcpus.push(v),
            }
        }
        for m in p.modules {
            if !merged
                .modules
                .iter()
                .any(|x| x.name == m.name && x.base == m.base)
            {
                merged.modules.push(m);
            }
        }
        for m in p.guest_modules {
            if !merged.guest_modules.contains(&m) {
                merged.guest_modules.push(m);
            }
        }
        merged.processes.extend(p.processes);
        merged.threads.extend(p.threads);
        for o in p.objects {
            match merged.objects.iter().position(|x| key(x) == key(&o)) {
                Some(i) => {
                    let x = &mut merged.objects[i];
                    *x = add_object(x, &o).map_err(|what| MergeError::Overflow {
                        other: runs,
                        what: format!("objects[{i}].{what}"),
                    })?;
                }
                None => merged.objects.push(o),
            }
        }
    }
    merged.run.outcome = format!("merged from {runs} runs");
    // Objects summed from several runs: their per-process totals, from the threads of all.
    crate::processes::add_totals(&mut merged);
    // What merge writes, report and compare must read.
    crate::validate::check(&merged).map_err(MergeError::Inconsistent)?;
    Ok(merged)
}

/// `into` plus `from`, or the name of the field whose sum overflowed.
fn add_object(into: &ProfileObject, from: &ProfileObject) -> Result<ProfileObject, &'static str> {
    let mut out = into.clone();
    let mut counts: BTreeMap<u64, u64> = into.counts.iter().copied().collect();
    for (i, c) in &from.counts {
        let e = counts.entry(*i).or_default();
        *e = e.checked_add(*c).ok_or("counts")?;
    }
    out.counts = counts.into_iter().collect();
    out.total = into.total.checked_add(from.total).ok_or("total")?;
    // Known for the sum only when known for both.
    out.sampled_by = match (into.sampled_by, from.sampled_by) {
        (Some(a), Some(b)) => Some(SampledBy {
            kernel: a.kernel.checked_add(b.kernel).ok_or("sampled_by.kernel")?,
            kick: a.kick.checked_add(b.kick).ok_or("sampled_by.kick")?,
        }),
        _ => None,
    };
    // Per-function totals add up only if both sides have them: otherwise they would not add
    // up to the total, and the merged object is left unsymbolized (report symbolizes it).
    out.functions = if into.functions.is_empty() || from.functions.is_empty() {
        Vec::new()
    } else {
        let mut functions: FunctionTotals = FunctionTotals::new();
        for f in into.functions.iter().chain(&from.functions) {
            let e = functions
                .entry((f.module.clone(), f.name.clone()))
                .or_default();
            *e = e.checked_add(f.samples).ok_or("functions")?;
        }
        FunctionCount::ranked(functions)
    };
    // A stack's identity includes its thread (keys of different runs never meet: renumbered).
    type StackKey = (Vec<u64>, bool, Option<u32>);
    let mut stacks: BTreeMap<StackKey, u64> = BTreeMap::new();
    for s in into.stacks.iter().chain(&from.stacks) {
        let pcs = s.pcs.iter().map(|p| p.0).collect();
        let e = stacks.entry((pcs, s.truncated, s.thread)).or_default();
        *e = e.checked_add(s.count).ok_or("stacks")?;
    }
    let mut merged: Vec<StackCount> = stacks
        .into_iter()
        .map(|((pcs, truncated, thread), count)| StackCount {
            thread,
            ..StackCount::new(pcs, truncated, count)
        })
        .collect();
    merged.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.pcs.cmp(&b.pcs))
            .then_with(|| a.thread.cmp(&b.thread))
    });
    // Per-thread counts: the two runs' threads are distinct; kept only if both have them.
    out.threads = if into.threads.is_empty() || from.threads.is_empty() {
        Vec::new()
    } else {
        into.threads.iter().chain(&from.threads).cloned().collect()
    };
    out.stacks = merged;
    out.stacks_dropped = into
        .stacks_dropped
        .checked_add(from.stacks_dropped)
        .ok_or("stacks_dropped")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    /// Regression: comparing a symbolized profile with an unsymbolized one of the same run
    /// flagged every row, because function names met bucket names.
    #[test]
    fn symbolized_against_unsymbolized_compares_buckets_and_flags_nothing() {
        let mut with = sample_profile(0x1000);
        with.objects[0].functions = vec![FunctionCount {
            module: Some("m".into()),
            name: "f".into(),
            samples: 15,
        }];
        let without = sample_profile(0x1000);
        assert!(without.objects[0].functions.is_empty());
        let opts = TestOptions {
            min_samples: 1,
            ..TestOptions::default()
        };
        let none = Symbols::default();
        let (objects, unmatched) =
            compare_profiles(&with, &without, &opts, Scope::All, [&none, &none]);
        assert!(unmatched.is_empty());
        assert_eq!(objects[0].regressions(), 0);
        assert!(objects[0]
            .functions
            .iter()
            .all(|c| c.name.starts_with("0x")));
    }

    fn with_stacks(paths: &[(&[u64], u64)]) -> Profile {
        let mut p = sample_profile(0x1000);
        p.objects[0].stacks = paths
            .iter()
            .map(|(pcs, count)| StackCount::new(pcs.iter().copied(), false, *count))
            .collect();
        p
    }

    #[test]
    fn a_caller_path_that_grew_is_a_regression_even_if_its_leaf_did_not() {
        use crate::symbols::tests::module;
        // `hot` is called from `a` and from `b`; in the new run the `b` path took the time.
        let base = with_stacks(&[
            (&[0x1074, 0x1041, 0x1011], 500),
            (&[0x1074, 0x1051, 0x1011], 500),
        ]);
        let new = with_stacks(&[
            (&[0x1074, 0x1041, 0x1011], 300),
            (&[0x1074, 0x1051, 0x1011], 700),
        ]);
        let symbols = Symbols::from_module(module(
            "m",
            0x1000,
            &[
                (0x10, 0x10, "main"),
                (0x40, 0x10, "a"),
                (0x50, 0x10, "b"),
                (0x70, 0x30, "hot"),
            ],
        ));
        let rows = stack_rows(&new.objects[0], &Tasks::new(&new), &symbols);
        assert_eq!(
            rows,
            [
                ("m!main;m!a;m!hot".into(), 300),
                ("m!main;m!b;m!hot".into(), 700)
            ]
        );
        let (objects, _) = compare_profiles(
            &base,
            &new,
            &TestOptions::default(),
            Scope::All,
            [&symbols, &symbols],
        );
        let o = &objects[0];
        assert!(
            o.functions.iter().all(|c| !c.regression),
            "the flat counts did not move"
        );
        let grown: Vec<&str> = o
            .stacks
            .iter()
            .filter(|c| c.regression)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(grown, ["m!main;m!b;m!hot"]);
        assert_eq!(o.regressions(), 1);
    }

    /// A second run of `sample_profile`'s workload: another start time and counters.
    fn rerun(mut p: Profile) -> Profile {
        p.run.start_time = "2023-11-14T22:20:00.000Z".into();
        p.vcpus[0].samples += 1;
        p
    }

    #[test]
    fn merging_adds_up_stacks() {
        let a = with_stacks(&[(&[1, 2], 3), (&[1, 3], 1)]);
        let b = rerun(with_stacks(&[(&[1, 2], 4)]));
        let m = merge_profiles(vec![a, b]).unwrap();
        let counts: Vec<u64> = m.objects[0].stacks.iter().map(|s| s.count).collect();
        assert_eq!(counts, [7, 1]);
    }

    /// Regression: one file given twice counted as two runs.
    #[test]
    fn the_same_run_twice_is_refused() {
        let a = sample_profile(0x1000);
        let mut copy = a.clone();
        // `hvprof report --out` rewrote it with symbols: still the same run.
        copy.symbolize(&crate::profile::tests::call_site_symbols());
        let e = merge_profiles(vec![a.clone(), rerun(a.clone()), copy]).unwrap_err();
        assert!(
            matches!(e, MergeError::SameRun { first: 1, again: 3 }),
            "{e}"
        );
        let m = merge_profiles(vec![a.clone(), rerun(a)]).unwrap();
        assert_eq!(m.objects[0].total, 30);
        assert_eq!(m.run.outcome, "merged from 2 runs");
        crate::validate::check(&m).unwrap();
    }

    /// Regression: runs of other kernels and command lines were merged under the first
    /// run's metadata.
    #[test]
    fn runs_of_another_configuration_are_refused() {
        let a = sample_profile(0x1000);
        let mut b = rerun(a.clone());
        b.run.cmdline = "scenario=other".into();
        let e = merge_profiles(vec![a.clone(), b]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "profile 2 is not a run of the same configuration as profile 1: run.cmdline is \
             \"scenario=other\", not \"scenario=shares\""
        );
        let mut b = rerun(a.clone());
        b.run.kernel = "/other/kernel.elf".into();
        assert!(matches!(
            merge_profiles(vec![a.clone(), b]),
            Err(MergeError::Different {
                field: "run.kernel",
                ..
            })
        ));
        // The same kernel file on another host: merged, both paths kept.
        let (mut a, mut b) = (a.clone(), rerun(a));
        a.run.kernel = "/host1/vmlinux".into();
        b.run.kernel = "/host2/vmlinux".into();
        b.hvprof_version = "0.2.0".into();
        let m = merge_profiles(vec![a, b]).unwrap();
        assert_eq!(m.run.kernel, "/host1/vmlinux | /host2/vmlinux");
        assert_eq!(m.hvprof_version, "0.1.0 | 0.2.0");
    }

    #[test]
    fn sums_past_2_64_are_refused_and_functions_kept_only_if_both_have_them() {
        let mut a = sample_profile(0x1000);
        a.objects[0].counts[0].1 = u64::MAX - 10;
        a.objects[0].total = u64::MAX;
        let e = merge_profiles(vec![a, rerun(sample_profile(0x1000))]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "adding profile 2: objects[0].total passes 2^64-1"
        );
        let mut a = sample_profile(0x1000);
        a.symbolize(&crate::profile::tests::call_site_symbols());
        assert!(!a.objects[0].functions.is_empty());
        let m = merge_profiles(vec![a, rerun(sample_profile(0x1000))]).unwrap();
        assert!(m.objects[0].functions.is_empty());
        crate::validate::check(&m).unwrap();
        // Each object's sum fits, all of them together do not: refused.
        let mut a = sample_profile(0x1000);
        a.objects[0].counts = vec![(0, 1 << 62)];
        a.objects[0].total = 1 << 62;
        let mut b = rerun(a.clone());
        b.objects[0].id = 2;
        assert!(matches!(
            merge_profiles(vec![a, b]),
            Err(MergeError::Inconsistent(_))
        ));
    }
}
