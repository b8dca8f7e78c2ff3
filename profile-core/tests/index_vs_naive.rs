//! Property tests: the attribution index against the naive model (walk every object, apply
//! Windows' rule), on random objects and samples with overlaps, range ends, affinities, huge
//! ranges near `u64::MAX`, many nested or packed objects in one region, and objects stopped
//! and started again; the request parser against arbitrary bytes.

use proptest::prelude::*;

use profile_core::abi::decode_request;
use profile_core::affinity::{active_mask, group_count, GroupAffinity};
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
fn nested_obj() -> impl Strategy<Value = Obj> {
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

fn build(processors: u32, objs: &[Obj]) -> ObjectManager<ObjectId> {
    let mut platform = PlatformInfo::timer_only(processors);
    platform.sources.push(SourceInfo {
        source: PMU,
        min_interval: 1,
        max_interval: 10,
        default_interval: 5,
    });
    let mut m = ObjectManager::new(platform).unwrap();
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

fn sample_pcs(objs: &[Obj]) -> Vec<u64> {
    let mut pcs = vec![0, 1, 63, 64, u64::MAX, u64::MAX - 1];
    for o in objs {
        let end = o.base.wrapping_add(o.size);
        pcs.extend([
            o.base,
            o.base.wrapping_sub(1),
            end,
            end.wrapping_sub(1),
            o.base.wrapping_add(o.size / 2),
        ]);
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
    ) {
        let m = build(processors, &objs);
        for pc in sample_pcs(&objs) {
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
    fn index_matches_naive_model_through_stops_and_restarts(
        objs in proptest::collection::vec(obj(), 150..300),
        churn in proptest::collection::vec(0u8..3, 300),
    ) {
        // Many objects per table; then some stopped (1) and some stopped and started again
        // (2), which moves records within their tables and empties some process tables.
        let mut m = build(4, &objs);
        let owner = Owner(1);
        let handles: Vec<_> = m.objects().map(|(h, _)| h).collect();
        for (&h, &what) in handles.iter().zip(&churn) {
            if what != 0 && m.object(owner, h).unwrap().is_started() {
                m.stop(owner, h).unwrap();
            }
        }
        for (&h, &what) in handles.iter().zip(&churn) {
            if what == 2 {
                m.start(owner, h, |req| Ok(req.object)).unwrap();
            }
        }
        for pc in sample_pcs(&objs) {
            for process in PROCESSES {
                compare(&m, &Sample { vcpu: 1, pc, process, source: ProfileSource::TIME })?;
            }
        }
    }

    #[test]
    fn index_matches_naive_model_with_nested_and_packed_objects(
        objs in proptest::collection::vec(nested_obj(), 3..120),
        stop_more in proptest::collection::vec(any::<bool>(), 120),
    ) {
        // Nested and packed objects in a 1 MiB region of two processes and the global table:
        // many objects hold each PC, before and after some are stopped.
        let mut m = build(4, &objs);
        let owner = Owner(1);
        let check = |m: &ObjectManager<ObjectId>| -> Result<(), TestCaseError> {
            for pc in sample_pcs(&objs) {
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
