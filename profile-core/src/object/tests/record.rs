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
fn record_lone_large_object_is_chunked_not_wide() {
    // The first chunk-size policy counted a wide object as only MAX_SPAN memberships, within
    // the slack, so a lone object went wide at the finest chunk size.
    let mut m = manager(4);
    let mut p = params();
    p.size = 0x8_0000;
    p.buffer_size = 0x8_0000 / 16 * 4;
    let h = create(&mut m, &p).unwrap();
    start(&mut m, h, 1).unwrap();
    let stats = m.index_stats();
    assert_eq!((stats.wide, stats.started), (0, 1));
    assert!(stats.memberships <= 64, "{stats:?}");
    assert_eq!(
        hits(&m, sample(0, KBASE + 0x7_FFFF, None)),
        vec![(1, 0x7_FFF0 / 4)]
    );
}

#[test]
fn record_wide_objects_and_chunk_boundaries_with_forced_small_chunks() {
    // 4 KiB chunks: a 64-page object is chunked, a 65-page one is wide, per process and global.
    let mut m = manager(4);
    m.set_index_chunk_shift(Some(12));
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
        objects.push((process, base, size));
    }
    assert_eq!(m.index_stats().wide, 2, "{:?}", m.index_stats());
    for (_, base, size) in objects {
        for pc in [
            base,
            base + 0xFFF,
            base + 0x1000,
            base + size - 1,
            base + size,
        ] {
            for process in [None, proc_a, Some(0x2000)] {
                hits(&m, sample(1, pc & !0xFFF, process));
                hits(&m, sample(1, pc, process));
            }
        }
    }
    assert_eq!(hits(&m, sample(0, 0x7FF0_0000_0FFF, proc_a)).len(), 2);
    assert_eq!(hits(&m, sample(0, KBASE + 0x800, Some(0x2000))).len(), 2);
    m.set_index_chunk_shift(None);
    assert_eq!(m.index_stats().wide, 0);
    assert_eq!(hits(&m, sample(0, 0x7FF0_0000_0FFF, proc_a)).len(), 2);
}

#[test]
fn record_keys_of_one_tag_in_different_chunks_share_a_slot_and_count_exactly() {
    // Two (process, chunk) keys with the same chunk-map tag share a slot. Their members' chunk
    // offsets are relative to different chunks, so no split may choose between them: object
    // 1 sits high in the lower chunk, object 2 low in the higher one, where a split at 2's
    // offset would send 1's samples to 2.
    use crate::attribution::chunk_tag;
    use alloc::collections::BTreeMap;
    const SHIFT: u32 = 16;
    let first = 0x7FF8_0000_0000u64 >> SHIFT;
    let mut seen = BTreeMap::new();
    // Keys from xorshift: a multiplicative sequence would be spread without collisions, as
    // the map spreads a process's consecutive chunks.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x >> 24
    };
    let ((a1, b1), (a2, b2)) = (0..1 << 18)
        .map(|_| next())
        .map(|x| ((x >> 4) << 12, first + (x & 15)))
        .find_map(|(a, b)| match seen.insert(chunk_tag(a, b), (a, b)) {
            Some((a0, b0)) if b0 != b => Some(((a0, b0), (a, b))),
            _ => None,
        })
        .expect("some of 2^18 keys of 2^32 tags collide");
    let ((lo_a, lo_b), (hi_a, hi_b)) = if b1 < b2 {
        ((a1, b1), (a2, b2))
    } else {
        ((a2, b2), (a1, b1))
    };
    let objects = [
        (1, lo_a, (lo_b << SHIFT) + 0x9000),
        (2, hi_a, (hi_b << SHIFT) + 0x8000),
    ];
    let mut m = manager(1);
    m.set_index_chunk_shift(Some(SHIFT));
    for (tag, process, base) in objects {
        let p = CreateParams {
            process: Some(process),
            base,
            ..params()
        };
        let h = create(&mut m, &p).unwrap();
        start(&mut m, h, tag).unwrap();
    }
    assert_eq!(m.index_stats().keys, 1, "the two keys share one slot");
    for (_, process, base) in objects {
        for pc in [base - 1, base, base + 0x800, base + 0xFFF, base + 0x1000] {
            for p in [Some(lo_a), Some(hi_a)] {
                hits(&m, sample(0, pc, p));
            }
        }
        assert_eq!(hits(&m, sample(0, base + 0x800, Some(process))).len(), 1);
    }
}
