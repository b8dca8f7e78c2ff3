//! Comparing and merging saved profiles (profile.json). Objects are matched across runs by
//! owner, id, range and bucket size (a guest agent creates its objects in the same order each
//! run; per-process keys are not compared, since CR3 values differ between boots).

use std::collections::BTreeMap;

use super::stats::{compare, Change, TestOptions};
use crate::profile::FunctionTotals;
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
}

impl ObjectComparison {
    /// Function-level regressions.
    pub fn regressions(&self) -> usize {
        self.functions.iter().filter(|c| c.regression).count()
    }
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

/// Compares every object of `scope` present in both profiles. Objects in only one are
/// ignored (and reported by the caller from `unmatched`).
pub fn compare_profiles(
    base: &Profile,
    new: &Profile,
    opts: &TestOptions,
    scope: Scope,
) -> (Vec<ObjectComparison>, Vec<String>) {
    let new_by_key: BTreeMap<ObjectKey, &ProfileObject> =
        new.objects.iter().map(|o| (key(o), o)).collect();
    let mut out = Vec::new();
    let mut unmatched = Vec::new();
    for b in base.objects.iter().filter(|o| scope.includes(o.owner)) {
        match new_by_key.get(&key(b)) {
            Some(n) => {
                let (base_rows, new_rows) = function_rows(b, n);
                out.push(ObjectComparison {
                    label: label(b),
                    functions: compare(&base_rows, &new_rows, opts),
                    buckets: compare(&bucket_rows(b), &bucket_rows(n), opts),
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
        let (objects, unmatched) = compare_profiles(&with, &without, &opts, Scope::All);
        assert!(unmatched.is_empty());
        assert_eq!(objects[0].regressions(), 0);
        assert!(objects[0]
            .functions
            .iter()
            .all(|c| c.name.starts_with("0x")));
    }
}
