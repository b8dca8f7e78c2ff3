//! NtCreateProfile(Ex): each check, its status and Windows' order; handle values.

use super::*;

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
