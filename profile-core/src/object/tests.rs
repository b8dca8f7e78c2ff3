//! One test per documented behaviour and status of the object manager.

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::affinity::{GroupAffinity, KAFFINITY_ALL};
use crate::attribution::{CounterSink, Sample};
use crate::handle::Handle;
use crate::source::DEFAULT_TIME_INTERVAL;
use crate::NtStatus;

const OWNER: Owner = Owner(1);
const KBASE: u64 = 0xFFFF_F800_0000_0000;
const PMU: ProfileSource = ProfileSource::TOTAL_CYCLES;

fn platform(n: u32) -> PlatformInfo {
    let mut p = PlatformInfo::timer_only(n);
    p.sources.push(SourceInfo {
        source: PMU,
        min_interval: 10_000,
        max_interval: 100_000_000,
        default_interval: 1_000_000,
    });
    p
}

fn manager(n: u32) -> ObjectManager<u32> {
    ObjectManager::new(platform(n)).unwrap()
}

/// A valid global kernel-range profile: 4 KiB in 16-byte buckets, exactly 1 KiB of counters.
fn params() -> CreateParams {
    CreateParams {
        owner: OWNER,
        process: None,
        base: KBASE,
        size: 0x1000,
        bucket_size: 4,
        buffer: 0x1000_0000,
        buffer_size: 1024,
        source: ProfileSource::TIME,
        buffer_writable: true,
        access: AccessMask::PROFILE_CONTROL,
        caller: CallerRights::KERNEL,
    }
}

fn create(m: &mut ObjectManager<u32>, p: &CreateParams) -> Result<Handle, NtStatus> {
    m.create(p, 0, KAFFINITY_ALL)
}

fn start(m: &mut ObjectManager<u32>, h: Handle, tag: u32) -> Result<Started, NtStatus> {
    m.start(OWNER, h, |_| Ok(tag))
}

#[derive(Default)]
struct Recorder(Vec<(u32, ObjectId, u64)>);

impl CounterSink<u32> for Recorder {
    fn increment(&mut self, pin: &u32, object: ObjectId, byte_offset: u64) {
        self.0.push((*pin, object, byte_offset));
    }
}

fn sample(vcpu: u32, pc: u64, process: Option<u64>) -> Sample {
    Sample {
        vcpu,
        pc,
        process,
        source: ProfileSource::TIME,
    }
}

fn hits(m: &ObjectManager<u32>, s: Sample) -> Vec<(u32, u64)> {
    let mut r = Recorder::default();
    let n = m.record(&s, &mut r);
    let mut naive = Recorder::default();
    assert_eq!(m.record_naive(&s, &mut naive), n);
    let mut got: Vec<(u32, u64)> = r.0.iter().map(|&(p, _, o)| (p, o)).collect();
    let mut want: Vec<(u32, u64)> = naive.0.iter().map(|&(p, _, o)| (p, o)).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "index and naive model disagree");
    got
}

fn create_err(p: CreateParams) -> NtStatus {
    create(&mut manager(4), &p).unwrap_err()
}

#[test]
fn create_buffer_size_zero_is_invalid_parameter_7() {
    assert_eq!(
        create_err(CreateParams {
            buffer_size: 0,
            ..params()
        }),
        NtStatus::INVALID_PARAMETER_7
    );
}

#[test]
fn create_bucket_size_zero_on_64_bit_is_invalid_parameter() {
    assert_eq!(
        create_err(CreateParams {
            bucket_size: 0,
            ..params()
        }),
        NtStatus::INVALID_PARAMETER
    );
}

#[test]
fn create_bucket_size_outside_2_to_31_is_invalid_parameter() {
    for bucket_size in [1, 32, 63, u32::MAX] {
        let p = CreateParams {
            bucket_size,
            ..params()
        };
        assert_eq!(
            create_err(p),
            NtStatus::INVALID_PARAMETER,
            "{}",
            bucket_size
        );
    }
}

#[test]
fn create_bucket_size_2_and_31_are_accepted() {
    let mut m = manager(4);
    assert!(create(
        &mut m,
        &CreateParams {
            bucket_size: 2,
            size: 1024,
            ..params()
        }
    )
    .is_ok());
    assert!(create(
        &mut m,
        &CreateParams {
            bucket_size: 31,
            size: 1 << 39,
            ..params()
        }
    )
    .is_ok());
}

#[test]
fn create_buffer_too_small_uses_corrected_rule() {
    let mut m = manager(4);
    // 4 KiB in 16-byte buckets: 256 counters, 1024 bytes. Exactly enough is fine.
    assert!(create(&mut m, &params()).is_ok());
    let short = CreateParams {
        buffer_size: 1020,
        ..params()
    };
    assert_eq!(create(&mut m, &short), Err(NtStatus::BUFFER_TOO_SMALL));
    // The pre-1703 rule (`Size >> (BucketSize - 2) > BufferSize`) accepted 6 bytes of range
    // in 4-byte buckets with a 6-byte buffer: 2 counters in room for 1. Not any more.
    let old_bug = CreateParams {
        size: 6,
        bucket_size: 2,
        buffer_size: 6,
        ..params()
    };
    assert_eq!(create(&mut m, &old_bug), Err(NtStatus::BUFFER_TOO_SMALL));
    // A range that ends mid-bucket still needs that bucket: 4097 bytes -> 257 counters.
    let partial = CreateParams {
        size: 0x1001,
        ..params()
    };
    assert_eq!(create(&mut m, &partial), Err(NtStatus::BUFFER_TOO_SMALL));
}

#[test]
fn create_range_overflow_is_buffer_overflow() {
    let p = CreateParams {
        base: u64::MAX - 0xFFF,
        size: 0x2000,
        buffer_size: 4096,
        ..params()
    };
    assert_eq!(create_err(p), NtStatus::BUFFER_OVERFLOW);
}

#[test]
fn create_range_ending_at_two_pow_64_is_buffer_overflow() {
    let p = CreateParams {
        base: u64::MAX - 0xFFF,
        size: 0x1000,
        ..params()
    };
    assert_eq!(create_err(p), NtStatus::BUFFER_OVERFLOW);
    let ok = CreateParams {
        base: u64::MAX - 0x1000,
        size: 0x1000,
        ..params()
    };
    assert!(create(&mut manager(4), &ok).is_ok());
}

#[test]
fn create_unsupported_source_is_not_supported() {
    let mut m: ObjectManager<u32> = ObjectManager::new(PlatformInfo::timer_only(4)).unwrap();
    assert_eq!(
        create(
            &mut m,
            &CreateParams {
                source: PMU,
                ..params()
            }
        ),
        Err(NtStatus::NOT_SUPPORTED)
    );
    let odd = CreateParams {
        source: ProfileSource(0x1234),
        ..params()
    };
    assert_eq!(create(&mut m, &odd), Err(NtStatus::NOT_SUPPORTED));
}

#[test]
fn create_alignment_fixup_is_not_supported_unless_platform_lists_it() {
    let p = CreateParams {
        source: ProfileSource::ALIGNMENT_FIXUP,
        ..params()
    };
    assert_eq!(create_err(p), NtStatus::NOT_SUPPORTED);
}

#[test]
fn create_supported_pmu_source_succeeds() {
    assert!(create(
        &mut manager(4),
        &CreateParams {
            source: PMU,
            ..params()
        }
    )
    .is_ok());
}

#[test]
fn create_misaligned_buffer_is_datatype_misalignment() {
    for buffer in [0x1000_0001, 0x1000_0002, 0x1000_0003] {
        let p = CreateParams { buffer, ..params() };
        assert_eq!(create_err(p), NtStatus::DATATYPE_MISALIGNMENT);
    }
}

#[test]
fn create_unwritable_buffer_is_access_violation() {
    let p = CreateParams {
        buffer_writable: false,
        ..params()
    };
    assert_eq!(create_err(p), NtStatus::ACCESS_VIOLATION);
}

#[test]
fn create_buffer_wrapping_address_space_is_access_violation() {
    let p = CreateParams {
        buffer: u64::MAX - 3,
        ..params()
    };
    assert_eq!(create_err(p), NtStatus::ACCESS_VIOLATION);
}

#[test]
fn create_affinity_minus_one_means_all_active_processors() {
    let mut m = manager(3);
    let h = m.create(&params(), 0, KAFFINITY_ALL).unwrap();
    let cfg = m.object(OWNER, h).unwrap().config().clone();
    assert_eq!(cfg.affinity.iter().collect::<Vec<_>>(), vec![0, 1, 2]);
}

#[test]
fn create_empty_affinity_is_invalid_parameter() {
    assert_eq!(
        manager(4).create(&params(), 0, 0),
        Err(NtStatus::INVALID_PARAMETER)
    );
}

#[test]
fn create_affinity_with_inactive_processor_is_invalid_parameter() {
    assert_eq!(
        manager(4).create(&params(), 0, 0b1_0001),
        Err(NtStatus::INVALID_PARAMETER)
    );
    assert_eq!(
        manager(4).create(&params(), 1, KAFFINITY_ALL),
        Err(NtStatus::INVALID_PARAMETER)
    );
}

#[test]
fn create_ex_zero_groups_means_all_active_processors() {
    let mut m = manager(70);
    let h = m.create_ex(&params(), &[]).unwrap();
    assert_eq!(
        m.object(OWNER, h).unwrap().config().affinity.iter().count(),
        70
    );
}

#[test]
fn create_ex_bad_group_mask_or_reserved_is_invalid_parameter() {
    let mut m = manager(70);
    let mut reserved = GroupAffinity::new(0, 1);
    reserved.reserved[2] = 7;
    for groups in [
        [GroupAffinity::new(2, 1)],
        [GroupAffinity::new(1, 0)],
        [GroupAffinity::new(1, 0b1000_0000)],
        [reserved],
    ] {
        assert_eq!(
            m.create_ex(&params(), &groups),
            Err(NtStatus::INVALID_PARAMETER)
        );
    }
    assert!(m
        .create_ex(&params(), &[GroupAffinity::new(1, 0b10_0000)])
        .is_ok());
}

#[test]
fn create_global_user_range_without_privilege_is_privilege_not_held() {
    let caller = CallerRights {
        system_profile_privilege: false,
        restricted: false,
    };
    let p = CreateParams {
        base: 0x40_0000,
        caller,
        ..params()
    };
    assert_eq!(create_err(p), NtStatus::PRIVILEGE_NOT_HELD);
    let per_process = CreateParams {
        process: Some(0x1000),
        ..p
    };
    assert!(create(&mut manager(4), &per_process).is_ok());
}

#[test]
fn create_kernel_range_from_restricted_caller_is_access_denied() {
    let caller = CallerRights {
        system_profile_privilege: true,
        restricted: true,
    };
    assert_eq!(
        create_err(CreateParams { caller, ..params() }),
        NtStatus::ACCESS_DENIED
    );
    let user = CreateParams {
        base: 0x40_0000,
        caller,
        ..params()
    };
    assert!(create(&mut manager(4), &user).is_ok());
}

#[test]
fn create_checks_run_in_windows_order() {
    let caller = CallerRights {
        system_profile_privilege: false,
        restricted: true,
    };
    let mut p = CreateParams {
        buffer_size: 0,
        bucket_size: 40,
        size: 1 << 40,
        base: u64::MAX - 0xF,
        source: ProfileSource(0x99),
        buffer: 0x1001,
        buffer_writable: false,
        caller,
        ..params()
    };
    let mut m = manager(4);
    let mut seen = Vec::new();
    let mut next = |m: &mut ObjectManager<u32>, p: &CreateParams| {
        let s = m.create(p, 0, 0).unwrap_err();
        seen.push(s);
    };
    next(&mut m, &p);
    p.buffer_size = 0x8000_0000;
    next(&mut m, &p);
    p.bucket_size = 2;
    next(&mut m, &p);
    p.bucket_size = 31;
    next(&mut m, &p);
    p.base = 0x10;
    p.size = 0x1000;
    next(&mut m, &p);
    p.source = ProfileSource::TIME;
    next(&mut m, &p);
    p.buffer = 0x1000;
    next(&mut m, &p);
    p.buffer_writable = true;
    next(&mut m, &p);
    assert_eq!(
        seen,
        vec![
            NtStatus::INVALID_PARAMETER_7,
            NtStatus::INVALID_PARAMETER,
            NtStatus::BUFFER_TOO_SMALL,
            NtStatus::BUFFER_OVERFLOW,
            NtStatus::NOT_SUPPORTED,
            NtStatus::DATATYPE_MISALIGNMENT,
            NtStatus::ACCESS_VIOLATION,
            NtStatus::INVALID_PARAMETER,
        ]
    );
    assert_eq!(m.create(&p, 0, 1), Err(NtStatus::PRIVILEGE_NOT_HELD));
    p.base = KBASE;
    assert_eq!(m.create(&p, 0, 1), Err(NtStatus::ACCESS_DENIED));
}

#[test]
fn handle_values_are_nonzero_multiples_of_four_and_ids_unique() {
    let mut m = manager(1);
    let a = create(&mut m, &params()).unwrap();
    let b = create(&mut m, &params()).unwrap();
    assert!(a.0 != 0 && a.0 % 4 == 0 && b.0 % 4 == 0 && a != b);
    let id_a = m.object(OWNER, a).unwrap().id();
    m.close(OWNER, a).unwrap();
    let c = create(&mut m, &params()).unwrap();
    assert_eq!(c, a, "handle values are reused, as in Windows");
    assert_ne!(m.object(OWNER, c).unwrap().id(), id_a, "object ids are not");
}

#[test]
fn start_with_unknown_or_foreign_handle_is_invalid_handle() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    for bad in [Handle(0), Handle(3), Handle(h.0 + 4), Handle(h.0 + 1)] {
        assert_eq!(start(&mut m, bad, 0), Err(NtStatus::INVALID_HANDLE));
    }
    assert_eq!(
        m.start(Owner(2), h, |_| Ok(0)),
        Err(NtStatus::INVALID_HANDLE)
    );
    assert_eq!(m.stop(Owner(2), h), Err(NtStatus::INVALID_HANDLE));
    assert_eq!(m.close(Owner(2), h), Err(NtStatus::INVALID_HANDLE));
}

#[test]
fn start_and_stop_without_profile_control_are_access_denied() {
    let mut m = manager(1);
    let h = create(
        &mut m,
        &CreateParams {
            access: AccessMask(0x0002_0000),
            ..params()
        },
    )
    .unwrap();
    assert_eq!(start(&mut m, h, 0), Err(NtStatus::ACCESS_DENIED));
    assert_eq!(m.stop(OWNER, h), Err(NtStatus::ACCESS_DENIED));
    assert_eq!(m.close(OWNER, h), Ok(None), "close needs no access right");
}

#[test]
fn start_hands_back_the_whole_buffer_to_pin() {
    let mut m = manager(1);
    let p = CreateParams {
        buffer_size: 64 * 1024,
        ..params()
    };
    let h = create(&mut m, &p).unwrap();
    let mut asked = None;
    m.start(OWNER, h, |req| {
        asked = Some(*req);
        Ok(9)
    })
    .unwrap();
    let req = asked.unwrap();
    assert_eq!((req.buffer, req.buffer_size), (p.buffer, 64 * 1024));
    assert_eq!(req.counters_len, 1024);
    assert_eq!(req.object, m.object(OWNER, h).unwrap().id());
}

#[test]
fn start_twice_is_profiling_not_stopped_without_pinning() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 1).unwrap();
    let r = m.start(OWNER, h, |_| panic!("must not pin twice"));
    assert_eq!(r, Err(NtStatus::PROFILING_NOT_STOPPED));
}

#[test]
fn start_pin_failure_is_insufficient_resources_and_object_stays_stopped() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    let r = m.start(OWNER, h, |_| Err(NtStatus::INSUFFICIENT_RESOURCES));
    assert_eq!(r, Err(NtStatus::INSUFFICIENT_RESOURCES));
    assert!(!m.object(OWNER, h).unwrap().is_started());
    assert_eq!(m.started_count(), 0);
    assert!(hits(&m, sample(0, KBASE, None)).is_empty());
    assert!(start(&mut m, h, 1).is_ok());
}

#[test]
fn start_beyond_8192_per_processor_is_profiling_at_limit() {
    let mut m = manager(1);
    assert_eq!(m.started_limit(), 8192);
    for i in 0..8192u64 {
        let p = CreateParams {
            process: Some((i + 1) << 12),
            ..params()
        };
        let h = create(&mut m, &p).unwrap();
        start(&mut m, h, 0).unwrap();
    }
    let h = create(&mut m, &params()).unwrap();
    assert_eq!(
        m.start(OWNER, h, |_| panic!("no pin at limit")),
        Err(NtStatus::PROFILING_AT_LIMIT)
    );
    let first = Handle(4);
    m.stop(OWNER, first).unwrap();
    assert!(start(&mut m, h, 0).is_ok());
}

#[test]
fn stop_not_started_is_profiling_not_started() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    assert_eq!(m.stop(OWNER, h), Err(NtStatus::PROFILING_NOT_STARTED));
    start(&mut m, h, 1).unwrap();
    assert_eq!(m.stop(OWNER, h), Ok(1));
    assert_eq!(m.stop(OWNER, h), Err(NtStatus::PROFILING_NOT_STARTED));
}

#[test]
fn stop_returns_pin_and_no_sample_counts_after_stop() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 7).unwrap();
    assert_eq!(hits(&m, sample(0, KBASE + 0x20, None)), vec![(7, 8)]);
    assert_eq!(m.stop(OWNER, h), Ok(7));
    assert!(hits(&m, sample(0, KBASE + 0x20, None)).is_empty());
    assert_eq!(m.started_for_source(ProfileSource::TIME), 0);
}

#[test]
fn stop_then_start_again_counts_again() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    for round in 0..3 {
        start(&mut m, h, round).unwrap();
        assert_eq!(hits(&m, sample(0, KBASE, None)), vec![(round, 0)]);
        assert_eq!(m.stop(OWNER, h), Ok(round));
    }
}

#[test]
fn close_while_started_stops_and_returns_pin() {
    let mut m = manager(1);
    let h = create(&mut m, &params()).unwrap();
    start(&mut m, h, 5).unwrap();
    assert_eq!(m.close(OWNER, h), Ok(Some(5)));
    assert!(hits(&m, sample(0, KBASE, None)).is_empty());
    assert_eq!(m.started_count(), 0);
    assert_eq!(m.close(OWNER, h), Err(NtStatus::INVALID_HANDLE));
    assert_eq!(start(&mut m, h, 1), Err(NtStatus::INVALID_HANDLE));
}

#[test]
fn close_all_releases_every_object_of_one_owner_only() {
    let mut m = manager(1);
    let mine = [
        create(&mut m, &params()).unwrap(),
        create(&mut m, &params()).unwrap(),
    ];
    let other = m
        .create(
            &CreateParams {
                owner: Owner(2),
                ..params()
            },
            0,
            1,
        )
        .unwrap();
    start(&mut m, mine[0], 1).unwrap();
    m.start(Owner(2), other, |_| Ok(3)).unwrap();
    assert_eq!(m.close_all(OWNER), vec![1]);
    assert_eq!(m.open_count(), 1);
    assert_eq!(hits(&m, sample(0, KBASE, None)), vec![(3, 0)]);
}

#[test]
fn set_interval_clamps_to_the_source_range() {
    let mut m = manager(1);
    let t = ProfileSource::TIME;
    assert_eq!(m.set_interval(CallerRights::KERNEL, t, 1), Ok(1000));
    assert_eq!(m.query_interval(t), 1000);
    assert_eq!(
        m.set_interval(CallerRights::KERNEL, t, u32::MAX),
        Ok(10_000_000)
    );
    assert_eq!(m.set_interval(CallerRights::KERNEL, t, 12_345), Ok(12_345));
    assert_eq!(m.query_interval(t), 12_345);
}

#[test]
fn set_interval_is_global_per_source() {
    let mut m = manager(1);
    m.set_interval(CallerRights::KERNEL, PMU, 50_000).unwrap();
    assert_eq!(m.query_interval(PMU), 50_000);
    assert_eq!(m.query_interval(ProfileSource::TIME), DEFAULT_TIME_INTERVAL);
}

#[test]
fn set_interval_without_privilege_is_privilege_not_held() {
    let caller = CallerRights {
        system_profile_privilege: false,
        restricted: false,
    };
    let mut m = manager(1);
    let r = m.set_interval(caller, ProfileSource::TIME, 5000);
    assert_eq!(r, Err(NtStatus::PRIVILEGE_NOT_HELD));
    assert_eq!(m.query_interval(ProfileSource::TIME), DEFAULT_TIME_INTERVAL);
}

#[test]
fn query_interval_default_profile_time_is_39063() {
    assert_eq!(manager(1).query_interval(ProfileSource::TIME), 39_063);
}

#[test]
fn query_interval_unsupported_source_is_zero_and_set_changes_nothing() {
    let mut m: ObjectManager<u32> = ObjectManager::new(PlatformInfo::timer_only(1)).unwrap();
    assert_eq!(m.query_interval(PMU), 0);
    assert_eq!(m.set_interval(CallerRights::KERNEL, PMU, 5000), Ok(0));
    assert_eq!(m.query_interval(PMU), 0);
}

#[test]
fn alignment_fixup_query_returns_last_value_set() {
    let mut m = manager(1);
    let fixup = ProfileSource::ALIGNMENT_FIXUP;
    assert_eq!(m.query_interval(fixup), 0);
    assert_eq!(m.set_interval(CallerRights::KERNEL, fixup, 3), Ok(3));
    assert_eq!(
        m.set_interval(CallerRights::KERNEL, fixup, u32::MAX),
        Ok(u32::MAX)
    );
    assert_eq!(m.query_interval(fixup), u32::MAX);
}

#[test]
fn new_rejects_inconsistent_platforms() {
    assert!(ObjectManager::<u32>::new(PlatformInfo::timer_only(0)).is_err());
    assert!(ObjectManager::<u32>::new(PlatformInfo::timer_only(2049)).is_err());
    let mut no_timer = platform(1);
    no_timer.sources.remove(0);
    assert!(ObjectManager::<u32>::new(no_timer).is_err());
    let mut bad_clamp = platform(1);
    bad_clamp.sources[1].default_interval = 1;
    assert!(ObjectManager::<u32>::new(bad_clamp).is_err());
}

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
