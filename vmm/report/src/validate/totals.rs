//! The totals profile.json carries for scripts (a host object's `processes`, each per-thread
//! entry's `samples`, `user` and `kernel`), checked against the per-thread counts they
//! summarize: a file whose totals disagree is refused, so a script reading them reads what
//! every report shows.

use std::collections::{BTreeMap, BTreeSet};

use super::{bad, Inconsistent};
use crate::processes::{process_samples, split, ProcessSamples, Tasks};
use crate::profile::ProfileObject;

/// Checks the totals written for scripts (`threads[].samples`, `user`, `kernel`, and
/// `processes`) against the per-thread counts they summarize, when present. Runs after the
/// counts themselves are checked, so every sum here fits.
pub(super) fn check(tasks: &Tasks, at: &str, o: &ProfileObject) -> Result<(), Inconsistent> {
    for (n, t) in o.threads.iter().enumerate() {
        let at_t = format!("{at}.threads[{n}]");
        let given = [
            ("samples", t.samples),
            ("user", t.user),
            ("kernel", t.kernel),
        ];
        if given.iter().all(|(_, v)| v.is_none()) {
            continue;
        }
        let Some((samples, user, kernel)) = split(o, &t.counts) else {
            return Err(bad(
                format!("{at_t}.counts"),
                "the counts add up past 2^64-1",
            ));
        };
        for ((field, v), want) in given.into_iter().zip([samples, user, kernel]) {
            match v {
                Some(v) if v == want => {}
                Some(v) => {
                    return Err(bad(
                        format!("{at_t}.{field}"),
                        format!("{v}, but the thread's counts give {want}"),
                    ))
                }
                None => {
                    return Err(bad(
                        format!("{at_t}.{field}"),
                        "missing: samples, user and kernel are given together",
                    ))
                }
            }
        }
    }
    if o.processes.is_empty() {
        return Ok(());
    }
    let want: BTreeMap<u32, ProcessSamples> = process_samples(tasks, o)
        .into_iter()
        .map(|r| (r.process, r))
        .collect();
    let mut seen = BTreeSet::new();
    for (n, r) in o.processes.iter().enumerate() {
        let at_p = format!("{at}.processes[{n}]");
        if tasks.process(r.process).is_none() {
            return Err(bad(
                format!("{at_p}.process"),
                format!("{} is no process's key", r.process),
            ));
        }
        if !seen.insert(r.process) {
            return Err(bad(
                format!("{at_p}.process"),
                format!("process {} is listed twice", r.process),
            ));
        }
        let w = want.get(&r.process).copied().unwrap_or(ProcessSamples {
            samples: 0,
            user: 0,
            kernel: 0,
            ..*r
        });
        if (r.samples, r.user, r.kernel) != (w.samples, w.user, w.kernel) {
            return Err(bad(
                at_p,
                format!(
                    "process {} has {} samples ({} user, {} kernel), but its threads' counts give \
                     {} ({} user, {} kernel)",
                    r.process, r.samples, r.user, r.kernel, w.samples, w.user, w.kernel
                ),
            ));
        }
    }
    if let Some(missing) = want.keys().find(|k| !seen.contains(k)) {
        return Err(bad(
            format!("{at}.processes"),
            format!(
                "process {missing} has {} samples in the threads' counts but is not listed",
                want[missing].samples
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::processes::{add_totals, tests::tasks_profile};
    use crate::profile::{ProcessSamples, Profile};
    use crate::validate::check;

    fn totalled() -> Profile {
        let mut p = tasks_profile();
        add_totals(&mut p);
        p
    }

    #[test]
    fn totals_are_the_sums_of_the_threads_counts() {
        let p = totalled();
        check(&p).unwrap();
        let o = &p.objects[0];
        // awk: thread 20 (40 user, 10 kernel) and 21 (20 user); seq: 22 (15, 5) and 23 (6).
        let of = |k| {
            o.processes
                .iter()
                .find(|r| r.process == k)
                .copied()
                .unwrap()
        };
        assert_eq!((of(10).samples, of(10).user, of(10).kernel), (70, 60, 10));
        assert_eq!((of(11).samples, of(11).user, of(11).kernel), (26, 21, 5));
        assert_eq!(o.processes[0].process, 10, "most samples first");
        let t = &o.threads[0];
        assert_eq!(
            (t.samples, t.user, t.kernel),
            (Some(50), Some(40), Some(10))
        );
    }

    #[test]
    fn totals_that_disagree_with_the_counts_are_refused() {
        type Corruption = fn(&mut Profile);
        let cases: [(&str, Corruption); 7] = [
            (
                "objects[0].threads[0].samples: 51, but the thread's counts give 50",
                |p| p.objects[0].threads[0].samples = Some(51),
            ),
            (
                "objects[0].threads[0].user: 10, but the thread's counts give 40",
                |p| {
                    let t = &mut p.objects[0].threads[0];
                    (t.user, t.kernel) = (Some(10), Some(40));
                },
            ),
            ("objects[0].threads[2].kernel: missing", |p| {
                p.objects[0].threads[2].kernel = None
            }),
            (
                "objects[0].processes[0]: process 10 has 71 samples (61 user, 10 kernel), but \
                 its threads' counts give 70 (60 user, 10 kernel)",
                |p| {
                    let r = &mut p.objects[0].processes[0];
                    (r.samples, r.user) = (71, 61);
                },
            ),
            (
                "objects[0].processes[1].process: 99 is no process's key",
                |p| p.objects[0].processes[1].process = 99,
            ),
            (
                "objects[0].processes[1].process: process 10 is listed twice",
                |p| p.objects[0].processes[1] = p.objects[0].processes[0],
            ),
            (
                "objects[0].processes: process 12 has 4 samples in the threads' counts but is \
                 not listed",
                |p| {
                    p.objects[0].processes.pop();
                },
            ),
        ];
        for (expected, corrupt) in cases {
            let mut p = totalled();
            corrupt(&mut p);
            let e = check(&p).unwrap_err().to_string();
            assert!(
                e.starts_with(expected),
                "{e:?} does not start with {expected:?}"
            );
        }
    }

    #[test]
    fn absent_totals_pass_and_a_process_without_samples_may_be_listed_with_none() {
        // A file written before the totals: none at all.
        check(&tasks_profile()).unwrap();
        let mut p = totalled();
        p.processes.push(crate::profile::ProcessInfo {
            key: 13,
            ..p.processes[0].clone()
        });
        p.objects[0].processes.push(ProcessSamples {
            process: 13,
            samples: 0,
            user: 0,
            kernel: 0,
        });
        check(&p).unwrap();
        p.objects[0].processes.last_mut().unwrap().samples = 1;
        assert!(check(&p).is_err());
    }
}
