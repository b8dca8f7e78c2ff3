//! Comparing and merging saved profiles (profile.json). Objects are matched across runs by
//! owner, id, range and bucket size (a guest agent creates its objects in the same order each
//! run; per-process keys are not compared, since CR3 values differ between boots).
//!
//! Objects with call stacks on both sides are also compared stack by stack (each stack named
//! by its functions, outermost first): a caller path that grew is a regression even when the
//! function at its leaf did not. The family-wise alpha is then split evenly between the
//! function tests and the stack tests (Bonferroni over both families).

use std::collections::BTreeMap;

use super::stats::{compare, Change, TestOptions};
use crate::callers::named;
use crate::profile::{FunctionTotals, StackCount};
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
}

impl ObjectComparison {
    /// Function-level and stack-level regressions.
    pub fn regressions(&self) -> usize {
        self.functions
            .iter()
            .chain(&self.stacks)
            .filter(|c| c.regression)
            .count()
    }
}

/// (stack name, samples) rows of an object's call stacks: frames outermost first, joined by
/// `;` as in a folded flame graph, named with `symbols`.
pub fn stack_rows(o: &ProfileObject, symbols: &Symbols) -> Vec<(String, u64)> {
    let mut rows: BTreeMap<String, u64> = BTreeMap::new();
    for s in named(o, symbols) {
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
    for b in base.objects.iter().filter(|o| scope.includes(o.owner)) {
        match new_by_key.get(&key(b)) {
            Some(n) => {
                let (base_rows, new_rows) = function_rows(b, n);
                let with_stacks = !b.stacks.is_empty() && !n.stacks.is_empty();
                let family = TestOptions {
                    alpha: if with_stacks {
                        opts.alpha / 2.0
                    } else {
                        opts.alpha
                    },
                    ..*opts
                };
                let stacks = if with_stacks {
                    let (bs, ns) = (stack_rows(b, symbols[0]), stack_rows(n, symbols[1]));
                    compare(&bs, &ns, &family)
                } else {
                    Vec::new()
                };
                out.push(ObjectComparison {
                    label: label(b),
                    functions: compare(&base_rows, &new_rows, &family),
                    buckets: compare(&bucket_rows(b), &bucket_rows(n), opts),
                    stacks,
                });
            }
            None => unmatched.push(label(b)),
        }
    }
    (out, unmatched)
}

/// Why profiles cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no profiles to merge")]
    Empty,
}

/// Merges runs (repetitions, or the same workload on several hosts) into one profile: the
/// counts of matching objects add up, per-vCPU counters add up, the run's wall time is the sum.
pub fn merge_profiles(profiles: Vec<Profile>) -> Result<Profile, MergeError> {
    let mut iter = profiles.into_iter();
    let mut merged = iter.next().ok_or(MergeError::Empty)?;
    let mut runs = 1;
    for p in iter {
        runs += 1;
        merged.run.wall_time_s += p.run.wall_time_s;
        merged.run.start_time = merged.run.start_time.clone().min(p.run.start_time.clone());
        merged.run.exit_status = merged.run.exit_status.max(p.run.exit_status);
        if merged.run.kernel != p.run.kernel {
            merged.run.kernel = "(several kernels)".to_string();
        }
        for v in p.vcpus {
            match merged.vcpus.iter_mut().find(|m| m.vcpu == v.vcpu) {
                Some(m) => {
                    m.samples += v.samples;
                    m.attributed += v.attributed;
                    m.outside += v.outside;
                    m.lost += v.lost;
                    m.counts += v.counts;
                    m.injected += v.injected;
                    m.hypercalls += v.hypercalls;
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
        for o in p.objects {
            match merged.objects.iter_mut().find(|x| key(x) == key(&o)) {
                Some(x) => add_object(x, &o),
                None => merged.objects.push(o),
            }
        }
    }
    merged.run.outcome = format!("merged from {runs} runs");
    Ok(merged)
}

fn add_object(into: &mut ProfileObject, from: &ProfileObject) {
    let mut counts: BTreeMap<u64, u64> = into.counts.iter().copied().collect();
    for (i, c) in &from.counts {
        *counts.entry(*i).or_default() += c;
    }
    into.counts = counts.into_iter().collect();
    into.total += from.total;
    let mut functions: FunctionTotals = into
        .functions
        .iter()
        .map(|f| ((f.module.clone(), f.name.clone()), f.samples))
        .collect();
    for f in &from.functions {
        *functions
            .entry((f.module.clone(), f.name.clone()))
            .or_default() += f.samples;
    }
    into.functions = FunctionCount::ranked(functions);
    let mut stacks: BTreeMap<(Vec<u64>, bool), u64> = BTreeMap::new();
    for s in into.stacks.iter().chain(&from.stacks) {
        let pcs = s.pcs.iter().map(|p| p.0).collect();
        *stacks.entry((pcs, s.truncated)).or_default() += s.count;
    }
    let mut merged: Vec<StackCount> = stacks
        .into_iter()
        .map(|((pcs, truncated), count)| StackCount::new(pcs, truncated, count))
        .collect();
    merged.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.pcs.cmp(&b.pcs)));
    into.stacks = merged;
    into.stacks_dropped += from.stacks_dropped;
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
        let rows = stack_rows(&new.objects[0], &symbols);
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

    #[test]
    fn merging_adds_up_stacks() {
        let a = with_stacks(&[(&[1, 2], 3), (&[1, 3], 1)]);
        let b = with_stacks(&[(&[1, 2], 4)]);
        let m = merge_profiles(vec![a, b]).unwrap();
        let counts: Vec<u64> = m.objects[0].stacks.iter().map(|s| s.count).collect();
        assert_eq!(counts, [7, 1]);
    }
}
