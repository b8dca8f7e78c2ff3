//! Counting samples: bucket offsets, filters, overlaps, higher groups, per-source counts.

use super::*;

#[test]
fn record_counts_at_bucket_offset_with_exclusive_end() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 1).unwrap();
    assert_eq!(hits(&m, sample(0, KBASE, None)), vec![(1, 0)]);
    assert_eq!(hits(&m, sample(0, KBASE + 0x1F, None)), vec![(1, 4)]);
    assert_eq!(hits(&m, sample(0, KBASE + 0xFFF, None)), vec![(1, 1020)]);
    assert!(hits(&m, sample(0, KBASE + 0x1000, None)).is_empty());
    assert!(hits(&m, sample(0, KBASE - 1, None)).is_empty());
}

#[test]
fn record_filters_source_affinity_and_process() {
    let mut m = manager(4);
    let per_process = CreateParams {
        process: Some(0x5000),
        ..params()
    };
    let h = m.create(&per_process, 0, 0b0101).unwrap();
    start(&mut m, h, 1).unwrap();
    assert_eq!(hits(&m, sample(2, KBASE, Some(0x5000))), vec![(1, 0)]);
    assert!(
        hits(&m, sample(1, KBASE, Some(0x5000))).is_empty(),
        "vCPU outside affinity"
    );
    assert!(
        hits(&m, sample(0, KBASE, Some(0x6000))).is_empty(),
        "other process"
    );
    assert!(
        hits(&m, sample(0, KBASE, None)).is_empty(),
        "process unknown"
    );
    let pmu = Sample {
        source: PMU,
        ..sample(0, KBASE, Some(0x5000))
    };
    assert!(hits(&m, pmu).is_empty(), "other source");
}

#[test]
fn record_global_object_counts_every_process() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 1).unwrap();
    assert_eq!(hits(&m, sample(0, KBASE, Some(0x7000))).len(), 1);
    assert_eq!(hits(&m, sample(0, KBASE, None)).len(), 1);
}

#[test]
fn record_overlapping_objects_all_count() {
    let mut m = manager(1);
    let outer = create(&mut m, &params()).unwrap();
    let inner_p = CreateParams {
        base: KBASE + 0x100,
        size: 0x100,
        bucket_size: 2,
        ..params()
    };
    let inner = create(&mut m, &inner_p).unwrap();
    let proc_p = CreateParams {
        process: Some(0x9000),
        ..params()
    };
    let proc_obj = create(&mut m, &proc_p).unwrap();
    start(&mut m, outer, 1).unwrap();
    start(&mut m, inner, 2).unwrap();
    start(&mut m, proc_obj, 3).unwrap();
    let got = hits(&m, sample(0, KBASE + 0x104, Some(0x9000)));
    assert_eq!(got, vec![(1, 0x40), (2, 4), (3, 0x40)]);
}

#[test]
fn record_vcpu_in_a_higher_group() {
    let mut m = manager(130);
    let h = m
        .create_ex(&params(), &[GroupAffinity::new(2, 0b10)])
        .unwrap();
    start(&mut m, h, 1).unwrap();
    assert_eq!(hits(&m, sample(129, KBASE, None)), vec![(1, 0)]);
    assert!(hits(&m, sample(128, KBASE, None)).is_empty());
    assert!(hits(&m, sample(1, KBASE, None)).is_empty());
}

#[test]
fn started_for_source_tracks_which_sources_to_sample() {
    let mut m = manager(1);
    let a = create(
        &mut m,
        &CreateParams {
            source: PMU,
            ..params()
        },
    )
    .unwrap();
    assert_eq!(m.started_for_source(PMU), 0);
    assert_eq!(start(&mut m, a, 1).unwrap().source, PMU);
    assert_eq!(m.started_for_source(PMU), 1);
    m.close(OWNER, a).unwrap();
    assert_eq!(m.started_for_source(PMU), 0);
}

#[test]
fn record_large_object_counts_at_its_last_bucket() {
    let mut m = manager(4);
    let mut p = params();
    p.size = 0x8_0000;
    p.buffer_size = 0x8_0000 / 16 * 4;
    let h = create(&mut m, &p).unwrap();
    start(&mut m, h, 1).unwrap();
    assert_eq!(
        hits(&m, sample(0, KBASE + 0x7_FFFF, None)),
        vec![(1, 0x7_FFF0 / 4)]
    );
}

#[test]
fn record_objects_of_both_tables_at_their_range_ends() {
    // Global and per-process objects, adjacent, nested and overlapping; every end checked
    // against the naive model for a sample of the process, of another one and of none.
    let mut m = manager(4);
    let proc_a = Some(0x1000);
    let mut objects = Vec::new();
    for (tag, process, base, size) in [
        (1, None, KBASE + 0x800, 64 * 0x1000 - 0x800),
        (2, None, KBASE, 65 * 0x1000),
        (3, proc_a, 0x7FF0_0000_0FFF, 64 * 0x1000 + 1),
        (4, proc_a, 0x7FF0_0000_0000, 0x1000),
    ] {
        let mut p = params();
        p.process = process;
        p.base = base;
        p.size = size;
        p.bucket_size = 12;
        p.buffer_size = 4 * 128;
        let h = create(&mut m, &p).unwrap();
        start(&mut m, h, tag).unwrap();
        objects.push((base, size));
    }
    for (base, size) in objects {
        for pc in [base - 1, base, base + 0x1000, base + size - 1, base + size] {
            for process in [None, proc_a, Some(0x2000)] {
                hits(&m, sample(1, pc, process));
            }
        }
    }
    assert_eq!(hits(&m, sample(0, 0x7FF0_0000_0FFF, proc_a)).len(), 2);
    assert_eq!(hits(&m, sample(0, KBASE + 0x800, Some(0x2000))).len(), 2);
}

#[test]
fn record_objects_at_the_same_range_count_for_their_own_process_only() {
    let mut m = manager(1);
    for (tag, process) in [(1, Some(0x1000)), (2, Some(0x2000)), (3, None)] {
        let p = CreateParams {
            process,
            ..params()
        };
        let h = create(&mut m, &p).unwrap();
        start(&mut m, h, tag).unwrap();
    }
    assert_eq!(
        hits(&m, sample(0, KBASE, Some(0x1000))),
        vec![(1, 0), (3, 0)]
    );
    assert_eq!(
        hits(&m, sample(0, KBASE, Some(0x2000))),
        vec![(2, 0), (3, 0)]
    );
    assert_eq!(hits(&m, sample(0, KBASE, Some(0x3000))), vec![(3, 0)]);
    assert_eq!(hits(&m, sample(0, KBASE, None)), vec![(3, 0)]);
}

#[test]
fn record_after_a_process_table_empties_and_fills_again() {
    // Stopping a process's last object drops its table; starting one makes a new table.
    let mut m = manager(1);
    let p = CreateParams {
        process: Some(0x5000),
        ..params()
    };
    let a = create(&mut m, &p).unwrap();
    let b = create(&mut m, &p).unwrap();
    start(&mut m, a, 1).unwrap();
    start(&mut m, b, 2).unwrap();
    let pc = sample(0, KBASE, Some(0x5000));
    assert_eq!(hits(&m, pc), vec![(1, 0), (2, 0)]);
    assert_eq!(m.stop(OWNER, a), Ok(1));
    assert_eq!(hits(&m, pc), vec![(2, 0)]);
    assert_eq!(m.close(OWNER, b), Ok(Some(2)));
    assert!(hits(&m, pc).is_empty());
    start(&mut m, a, 3).unwrap();
    assert_eq!(hits(&m, pc), vec![(3, 0)]);
}
