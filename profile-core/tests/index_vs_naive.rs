//! Property tests: the attribution index against the naive model (walk every object, apply
//! Windows' rule), on random objects and samples with overlaps, range ends, chunk boundaries,
//! affinities, wide objects (more than `MAX_SPAN` chunks, forced by small chunk sizes) and
//! huge ranges near `u64::MAX`, crowded chunks (many nested objects under one key), under the adaptive chunk size and forced ones; the stabbing
//! structure against brute force; the request parser against arbitrary bytes.

use proptest::prelude::*;

use profile_core::abi::decode_request;
use profile_core::affinity::{active_mask, group_count, GroupAffinity};
use profile_core::attribution::index::MAX_SPAN;
use profile_core::attribution::stab::{Layout, Stab};
use profile_core::object::AffinityArg;
use profile_core::{
    AccessMask, CallerRights, CounterSink, CreateParams, ObjectId, ObjectManager, Owner,
    PlatformInfo, ProfileSource, Sample, SourceInfo,
};

const PMU: ProfileSource = ProfileSource::TOTAL_CYCLES;
const PROCESSES: [Option<u64>; 4] = [None, Some(0x1000), Some(0x2000), Some(0x3_0000_0000)];

#[derive(Default)]
struct Collect(Vec<(ObjectId, u64)>);

impl CounterSink<ObjectId> for Collect {
    fn increment(&mut self, pin: &ObjectId, object: ObjectId, byte_offset: u64) {
        assert_eq!(*pin, object);
        self.0.push((object, byte_offset));
    }
}

#[derive(Clone, Debug)]
struct Obj {
    process: usize,
    base: u64,
    size: u64,
    bucket: u32,
    pmu: bool,
    groups: Vec<(u16, u64)>,
    start: bool,
    stop_after: bool,
}

fn obj() -> impl Strategy<Value = Obj> {
    (
        0..PROCESSES.len(),
        prop_oneof![0u64..64, 0u64..4096, Just(u64::MAX - 300), any::<u64>()],
        prop_oneof![
            0u64..64,
            0u64..2048,
            Just(0),
            0u64..(1 << 20),
            Just(1u64 << 40),
            any::<u64>()
        ],
        2u32..=31,
        any::<bool>(),
        proptest::collection::vec((0u16..3, any::<u64>()), 0..3),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(process, base, size, bucket, pmu, groups, start, stop_after)| Obj {
                process,
                base,
                size,
                bucket,
                pmu,
                groups,
                start,
                stop_after,
            },
        )
}

/// An object in a 1 MiB region, nested in or packed beside others (sizes 0 to 256 KiB).
fn crowded_obj() -> impl Strategy<Value = Obj> {
    (
        0..3usize,
        0u64..(1 << 20),
        0u64..(1 << 18),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(process, base, size, start, stop_after)| Obj {
            process,
            base: 0x7FF8_0000_0000 + (base & !0xFF),
            size,
            bucket: 4,
            pmu: false,
            groups: Vec::new(),
            start: start || process == 0,
            stop_after,
        })
}

fn build(
    processors: u32,
    objs: &[Obj],
    layout: Layout,
    shift: Option<u32>,
) -> ObjectManager<ObjectId> {
    let mut platform = PlatformInfo::timer_only(processors);
    platform.sources.push(SourceInfo {
        source: PMU,
        min_interval: 1,
        max_interval: 10,
        default_interval: 5,
    });
    let mut m = ObjectManager::new(platform).unwrap();
    m.set_index_layout(layout);
    m.set_index_chunk_shift(shift);
    let owner = Owner(1);
    let mut started = Vec::new();
    for o in objs {
        let buckets = |bucket: u32| {
            if o.size == 0 {
                0
            } else {
                ((o.size - 1) >> bucket) + 1
            }
        };
        // Large ranges need large buckets to fit a 32-bit BufferSize.
        let bucket = if buckets(o.bucket) * 4 > u64::from(u32::MAX) {
            31
        } else {
            o.bucket
        };
        let buffer_size = match u32::try_from(buckets(bucket) * 4) {
            Ok(size) => size.max(4),
            Err(_) => continue,
        };
        let params = CreateParams {
            owner,
            process: PROCESSES[o.process],
            base: o.base,
            size: o.size,
            bucket_size: bucket,
            buffer: 0x1000,
            buffer_size,
            source: if o.pmu { PMU } else { ProfileSource::TIME },
            buffer_writable: true,
            access: AccessMask::PROFILE_CONTROL,
            caller: CallerRights::KERNEL,
        };
        // Masks restricted to active processors so most creates succeed; empty = all.
        let groups: Vec<GroupAffinity> = o
            .groups
            .iter()
            .filter(|(g, _)| u32::from(*g) < group_count(processors))
            .map(|&(g, mask)| GroupAffinity::new(g, mask & active_mask(u32::from(g), processors)))
            .filter(|g| g.mask != 0)
            .collect();
        let handle = match m.create_with(&params, AffinityArg::Groups(&groups)) {
            Ok(h) => h,
            Err(_) => continue,
        };
        if o.start {
            m.start(owner, handle, |req| Ok(req.object)).unwrap();
            started.push((handle, o.stop_after));
        }
    }
    for (handle, stop) in started {
        if stop {
            m.stop(owner, handle).unwrap();
        }
    }
    m
}

fn sample_pcs(objs: &[Obj], shift: u32) -> Vec<u64> {
    let mut pcs = vec![0, 1, 63, 64, u64::MAX, u64::MAX - 1];
    let chunk = 1u64 << shift;
    for o in objs {
        let end = o.base.wrapping_add(o.size);
        pcs.extend([
            o.base,
            o.base.wrapping_sub(1),
            end,
            end.wrapping_sub(1),
            o.base.wrapping_add(o.size / 2),
        ]);
        // The chunk boundaries around both ends.
        for x in [o.base, end.wrapping_sub(1)] {
            let first = x & !(chunk - 1);
            let next = first.wrapping_add(chunk);
            pcs.extend([first, first.wrapping_sub(1), next, next.wrapping_sub(1)]);
        }
    }
    pcs
}

fn compare(m: &ObjectManager<ObjectId>, s: &Sample) -> Result<(), TestCaseError> {
    let (mut fast, mut naive) = (Collect::default(), Collect::default());
    let n_fast = m.record(s, &mut fast);
    let n_naive = m.record_naive(s, &mut naive);
    fast.0.sort_unstable();
    naive.0.sort_unstable();
    prop_assert_eq!(n_fast, n_naive);
    prop_assert_eq!(fast.0, naive.0, "sample {:?}", s);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn index_matches_naive_model(
        processors in prop_oneof![1u32..5, 60u32..140],
        objs in proptest::collection::vec(obj(), 1..40),
        vcpus in proptest::collection::vec(0u32..140, 1..4),
        layout in prop_oneof![Just(Layout::Auto), Just(Layout::Flat), Just(Layout::Tree)],
        shift in prop_oneof![Just(None), Just(Some(6)), Just(Some(8)), Just(Some(12)),
                             Just(Some(20)), Just(Some(63))],
    ) {
        let m = build(processors, &objs, layout, shift);
        let stats = m.index_stats();
        for pc in sample_pcs(&objs, stats.process_chunk_shift)
            .into_iter()
            .chain(sample_pcs(&objs, stats.global_chunk_shift))
        {
            for &vcpu in &vcpus {
                for process in PROCESSES {
                    for source in [ProfileSource::TIME, PMU] {
                        compare(&m, &Sample { vcpu: vcpu % processors.max(1), pc, process, source })?;
                    }
                }
            }
        }
    }

    #[test]
    fn index_matches_naive_model_after_adaptive_rebuilds(
        objs in proptest::collection::vec(obj(), 150..300),
        stop_more in proptest::collection::vec(any::<bool>(), 300),
    ) {
        // Enough objects that the chunk-size policy re-indexes while they start and stop.
        let mut m = build(4, &objs, Layout::Auto, None);
        let owner = Owner(1);
        let handles: Vec<_> = m.objects().map(|(h, _)| h).collect();
        for (h, stop) in handles.into_iter().zip(stop_more) {
            if stop && m.object(owner, h).unwrap().is_started() {
                m.stop(owner, h).unwrap();
            }
        }
        let stats = m.index_stats();
        prop_assert!(stats.memberships as u64 <= 4 * stats.started as u64 * MAX_SPAN + 64 * MAX_SPAN);
        for pc in sample_pcs(&objs, stats.process_chunk_shift) {
            for process in PROCESSES {
                compare(&m, &Sample { vcpu: 1, pc, process, source: ProfileSource::TIME })?;
            }
        }
    }

    #[test]
    fn index_matches_naive_model_with_crowded_chunks(
        objs in proptest::collection::vec(crowded_obj(), 3..120),
        shift in prop_oneof![Just(None), Just(Some(12)), Just(Some(16)), Just(Some(20))],
        stop_more in proptest::collection::vec(any::<bool>(), 120),
    ) {
        // Nested and packed objects in a 1 MiB region of two processes and the global table:
        // chunks with three or more members (the index's crowded keys) that grow, shrink back
        // to inline members and are rebuilt as objects start and stop.
        let mut m = build(4, &objs, Layout::Auto, shift);
        let owner = Owner(1);
        let stats = m.index_stats();
        let check = |m: &ObjectManager<ObjectId>| -> Result<(), TestCaseError> {
            for pc in sample_pcs(&objs, stats.process_chunk_shift) {
                for process in PROCESSES {
                    compare(m, &Sample { vcpu: 2, pc, process, source: ProfileSource::TIME })?;
                }
            }
            Ok(())
        };
        check(&m)?;
        let handles: Vec<_> = m.objects().map(|(h, _)| h).collect();
        for (h, stop) in handles.into_iter().zip(stop_more) {
            if stop && m.object(owner, h).unwrap().is_started() {
                m.stop(owner, h).unwrap();
            }
        }
        check(&m)?;
    }

    #[test]
    fn stab_matches_brute_force(
        ranges in proptest::collection::vec((0u64..200, 0u64..200), 0..60),
        pcs in proptest::collection::vec(0u64..210, 1..30),
    ) {
        let ranges: Vec<(u64, u64)> = ranges.into_iter().map(|(a, b)| (a.min(b), a.max(b))).collect();
        for layout in [Layout::Auto, Layout::Flat, Layout::Tree] {
            let stab = Stab::build(&ranges, layout);
            for &pc in &pcs {
                let mut got = Vec::new();
                stab.query(pc, |i| got.push(i as usize));
                got.sort_unstable();
                let want: Vec<usize> = ranges
                    .iter()
                    .enumerate()
                    .filter(|(_, &(s, e))| s <= pc && pc < e)
                    .map(|(i, _)| i)
                    .collect();
                prop_assert_eq!(&got, &want);
            }
        }
    }

    #[test]
    fn decode_request_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_request(&bytes);
    }

    #[test]
    fn decode_request_never_panics_on_valid_headers(
        call in 0u32..12,
        length in 0u32..400,
        body in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&call.to_le_bytes());
        bytes.extend_from_slice(&length.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&body);
        let _ = decode_request(&bytes);
    }
}
