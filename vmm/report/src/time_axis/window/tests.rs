use super::*;
use crate::compare::{compare_profiles, Scope, TestOptions};
use crate::profile::tests::call_site_symbols;
use crate::time_axis::testdata::{profile, MS, OBJECT};

#[test]
fn phases_and_seconds_resolve_to_intervals() {
    let p = profile();
    assert_eq!(
        resolve(&p, &Window::Phase("kernel".into())),
        Ok((1000 * MS, 2000 * MS))
    );
    assert_eq!(
        resolve(
            &p,
            &Window::Seconds {
                from: 0.25,
                to: Some(1.5)
            }
        ),
        Ok((250 * MS, 1500 * MS))
    );
    assert_eq!(
        resolve(
            &p,
            &Window::Seconds {
                from: 2.0,
                to: None
            }
        ),
        Ok((2000 * MS, u64::MAX))
    );
    let e = resolve(&p, &Window::Phase("boot".into())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the profile has no phase \"boot\" (its phases: firmware, kernel, user)"
    );
    for (from, to) in [
        (2.0, Some(1.0)),
        (1.0, Some(1.0)),
        (-1.0, None),
        (f64::NAN, None),
    ] {
        assert!(matches!(
            resolve(&p, &Window::Seconds { from, to }),
            Err(WindowError::Empty { .. })
        ));
    }
}

#[test]
fn a_profile_without_a_timeline_cannot_be_windowed() {
    let mut p = profile();
    p.timelines.clear();
    let e = resolve(&p, &Window::Phase("kernel".into())).unwrap_err();
    assert_eq!(e, WindowError::NoTimeline);
    assert_eq!(
        e.to_string(),
        "the profile has no timeline (record it with --timeline): it cannot be restricted to a time window"
    );
    assert_eq!(restrict(&p, 0, 1), Err(WindowError::NoTimeline));
}

#[test]
fn a_window_rebuilds_the_counts_threads_and_stacks_of_its_samples() {
    let p = profile();
    crate::validate::check(&p).unwrap();
    crate::validate::check(&restrict(&p, 0, u64::MAX).unwrap()).unwrap();
    let w = restrict(&p, 1000 * MS, 2000 * MS).unwrap();
    crate::validate::check(&w).unwrap();
    // The guest agent's object has no times: it is not in the window.
    assert_eq!(w.objects.len(), 1);
    let o = &w.objects[0];
    assert_eq!(o.id, OBJECT);
    // 0x1075 is bucket 7 of 0x1000 in 16-byte buckets.
    assert_eq!((o.total, o.counts.clone()), (30, vec![(7, 30)]));
    let threads: Vec<(u32, Vec<(u64, u64)>)> = o
        .threads
        .iter()
        .map(|t| (t.thread, t.counts.clone()))
        .collect();
    assert_eq!(threads, [(1, vec![(7, 20)]), (2, vec![(7, 10)])]);
    let stacks: Vec<(Vec<u64>, Option<u32>, u64)> = o
        .stacks
        .iter()
        .map(|s| (s.pcs.iter().map(|h| h.0).collect(), s.thread, s.count))
        .collect();
    assert_eq!(
        stacks,
        [
            (vec![0x1075, 0x1050], Some(1), 20),
            (vec![0x1075, 0x1050], Some(2), 10)
        ]
    );
    let samples: Vec<u64> = w.vcpus.iter().map(|v| v.samples).collect();
    assert_eq!(samples, [10]);
    assert!((w.run.wall_time_s - 1.0).abs() < 1e-9);
    // The firmware's samples have no thread: no per-thread counts.
    let f = restrict(&p, 0, 1000 * MS).unwrap();
    crate::validate::check(&f).unwrap();
    assert!(f.objects[0].threads.is_empty());
    assert_eq!(f.objects[0].stacks[0].count, 30);
    // The window's bounds: from inclusive, to exclusive.
    let edge = restrict(&p, 1000 * MS, 1000 * MS + 1).unwrap();
    assert_eq!(edge.objects[0].total, 1);
}

#[test]
fn compare_in_a_window_sees_what_the_whole_run_hides() {
    let base = profile();
    // The new run: in the kernel phase vCPU 0 and 1 run `next` instead of `hot`; the
    // run's other phases are the same.
    let mut new = profile();
    for s in &mut new.timelines[0].samples {
        if (1000 * MS..2000 * MS).contains(&s.t_ns) && s.vcpu < 2 {
            s.stack = 2;
        }
    }
    let opts = TestOptions {
        threshold: 10.0,
        alpha: 0.01,
        min_samples: 1,
        min_points: 1.0,
    };
    let symbols = call_site_symbols();
    let regressions = |phase: &str| {
        let window = |p: &Profile| {
            let (from, to) = resolve(p, &Window::Phase(phase.into())).unwrap();
            let mut w = restrict(p, from, to).unwrap();
            w.symbolize(&symbols);
            w
        };
        let (objects, unmatched) = compare_profiles(
            &window(&base),
            &window(&new),
            &opts,
            Scope::Host,
            [&symbols, &symbols],
        );
        assert!(unmatched.is_empty());
        objects.iter().map(|o| o.regressions()).sum::<usize>()
    };
    assert_eq!(regressions("firmware"), 0);
    assert_eq!(regressions("user"), 0);
    assert!(regressions("kernel") > 0);
}

/// The testdata profile with its host profile renumbered 1, the id of the guest agent's
/// object beside it (a run with an agent object 1 and a host profile 1).
fn agent_and_host_both_object_1() -> Profile {
    let mut p = profile();
    assert_eq!(p.objects[0].owner, crate::ObjectOwner::Guest);
    assert_eq!(p.objects[0].id, 1);
    p.objects[1].id = 1;
    p.timelines[0].object = 1;
    crate::validate::check(&p).unwrap();
    p
}

#[test]
fn window_of_host_profile_1_beside_agent_object_1_rebuilds_the_host_profile() {
    let p = agent_and_host_both_object_1();
    let (from, to) = resolve(&p, &Window::Phase("kernel".into())).unwrap();
    let w = restrict(&p, from, to).unwrap();
    assert_eq!(w.objects.len(), 1);
    let o = &w.objects[0];
    assert_eq!((o.owner, o.id), (crate::ObjectOwner::Host, 1));
    assert_eq!((o.base.0, o.total), (0x1000, 30));
    // The host profile's whole range, not the agent object's 0x100 bytes.
    assert_eq!(o.size.0, 0x10000);
}

#[test]
fn kernel_phase_regression_of_host_profile_1_beside_agent_object_1_is_caught() {
    let base = agent_and_host_both_object_1();
    let mut new = base.clone();
    for s in &mut new.timelines[0].samples {
        if (1000 * MS..2000 * MS).contains(&s.t_ns) {
            s.stack = 2;
        }
    }
    let opts = TestOptions {
        threshold: 10.0,
        alpha: 0.01,
        min_samples: 1,
        min_points: 1.0,
    };
    let symbols = call_site_symbols();
    let window = |p: &Profile| {
        let (from, to) = resolve(p, &Window::Phase("kernel".into())).unwrap();
        let mut w = restrict(p, from, to).unwrap();
        w.symbolize(&symbols);
        w
    };
    let (objects, _) = compare_profiles(
        &window(&base),
        &window(&new),
        &opts,
        Scope::Host,
        [&symbols, &symbols],
    );
    assert_eq!(objects.len(), 1);
    assert!(objects[0].regressions() > 0);
}
