use super::*;
use crate::messages::to_bytes;

const TIME_ONLY: u64 = 1;
const LIMIT: u64 = X64_USER_PROBE_ADDRESS;

fn good() -> Range {
    Range {
        base: 0xFFFF_F800_0000_0000,
        size: 0x20_0000,
        buffer: 0x1F_0000,
        buffer_size: 0x800,
        bucket_size: 12,
        source: 0,
    }
}

#[test]
fn a_good_request_passes() {
    assert_eq!(precheck_create(&good(), TIME_ONLY, LIMIT), Ok(()));
}

#[test]
fn each_check_in_windows_order() {
    let r = Range {
        buffer_size: 0,
        bucket_size: 1,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, TIME_ONLY, LIMIT),
        Err(NtStatus::INVALID_PARAMETER_7)
    );
    let r = Range {
        bucket_size: 32,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, TIME_ONLY, LIMIT),
        Err(NtStatus::INVALID_PARAMETER)
    );
    let r = Range {
        bucket_size: 0,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, TIME_ONLY, LIMIT),
        Err(NtStatus::INVALID_PARAMETER)
    );
    // 513 buckets need 0x804 bytes.
    let r = Range {
        size: 0x20_0001,
        base: u64::MAX,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, TIME_ONLY, LIMIT),
        Err(NtStatus::BUFFER_TOO_SMALL)
    );
    // An end of exactly 2^64 overflows.
    let r = Range {
        base: 0u64.wrapping_sub(0x20_0000),
        source: 5,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, TIME_ONLY, LIMIT),
        Err(NtStatus::BUFFER_OVERFLOW)
    );
    let r = Range {
        source: 5,
        buffer: 0xFFFF_C000_0000_0002,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, TIME_ONLY, LIMIT),
        Err(NtStatus::NOT_SUPPORTED)
    );
    let r = Range {
        source: 64,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, u64::MAX, LIMIT),
        Err(NtStatus::NOT_SUPPORTED)
    );
    let r = Range {
        buffer: 0xFFFF_C000_0000_0002,
        ..good()
    };
    assert_eq!(
        precheck_create(&r, TIME_ONLY, LIMIT),
        Err(NtStatus::DATATYPE_MISALIGNMENT)
    );
}

#[test]
fn kernel_buffers_are_refused_as_access_violation() {
    for buffer in [0xFFFF_C000_0001_0000, LIMIT - 0x7FC, u64::MAX - 0x7FF] {
        let r = Range { buffer, ..good() };
        assert_eq!(
            precheck_create(&r, TIME_ONLY, LIMIT),
            Err(NtStatus::ACCESS_VIOLATION),
            "{:#x}",
            buffer
        );
    }
    let r = Range {
        buffer: LIMIT - 0x800,
        ..good()
    };
    assert_eq!(precheck_create(&r, TIME_ONLY, LIMIT), Ok(()));
}

#[test]
fn an_empty_range_needs_no_buckets() {
    let r = Range {
        size: 0,
        buffer_size: 4,
        ..good()
    };
    assert_eq!(precheck_create(&r, TIME_ONLY, LIMIT), Ok(()));
}

#[test]
fn caller_rights_and_process_access() {
    assert_eq!(caller_flags(true), CALLER_SYSTEM_PROFILE_PRIVILEGE);
    assert_eq!(caller_flags(false), CALLER_RESTRICTED);
    assert_eq!(check_process_access(0, 8, false), Ok(()));
    assert_eq!(check_process_access(8, 8, false), Ok(()));
    assert_eq!(check_process_access(12, 8, true), Ok(()));
    assert_eq!(
        check_process_access(12, 8, false),
        Err(NtStatus::ACCESS_DENIED)
    );
}

fn create_in() -> CreateIn {
    CreateIn {
        process_id: 0,
        base: 0x1000,
        size: 0x1000,
        buffer: 0x10_0000,
        buffer_size: 0x400,
        bucket_size: 4,
        source: 0,
        flags: 0,
        group: 0,
        reserved0: 0,
        reserved1: 0,
        affinity: u64::MAX,
    }
}

#[test]
fn create_input_is_exact_and_reserved_fields_are_zero() {
    let c = create_in();
    let b: [u8; 64] = to_bytes(&c);
    assert_eq!(parse_create(&b), Ok(c));
    assert_eq!(parse_create(&b[..60]), Err(NtStatus::INFO_LENGTH_MISMATCH));
    let mut long = [0u8; 72];
    long[..64].copy_from_slice(&b);
    assert_eq!(parse_create(&long), Err(NtStatus::INFO_LENGTH_MISMATCH));
    for bad in [
        CreateIn { flags: 1, ..c },
        CreateIn { reserved0: 1, ..c },
        CreateIn { reserved1: 1, ..c },
    ] {
        assert_eq!(
            parse_create(&to_bytes::<_, 64>(&bad)),
            Err(NtStatus::INVALID_PARAMETER)
        );
    }
}

#[test]
fn create_request_carries_rights_and_process() {
    let c = create_in();
    let r = create_request(&c, None, true);
    assert_eq!(r.flags, CALLER_SYSTEM_PROFILE_PRIVILEGE);
    assert_eq!(r.process_cr3, 0);
    assert_eq!(r.desired_access, PROFILE_CONTROL);
    assert_eq!((r.base, r.size, r.buffer), (c.base, c.size, c.buffer));
    let r = create_request(&c, Some(0x1AB000), false);
    assert_eq!(r.flags, CALLER_RESTRICTED | CREATE_PER_PROCESS);
    assert_eq!(r.process_cr3, 0x1AB000);
}

#[test]
fn create_ex_input_with_groups() {
    let head = CreateExIn {
        base: 0x1000,
        size: 0x1000,
        buffer: 0x10_0000,
        buffer_size: 0x400,
        bucket_size: 4,
        group_count: 2,
        ..CreateExIn::default()
    };
    let mut input = [0u8; 56 + 32];
    input[..56].copy_from_slice(&to_bytes::<_, 56>(&head));
    input[56..72].copy_from_slice(&to_bytes::<_, 16>(&GroupAffinity::new(0, 3)));
    input[72..88].copy_from_slice(&to_bytes::<_, 16>(&GroupAffinity::new(1, 1)));
    let mut groups = [GroupAffinity::default(); 32];
    let (c, g) = parse_create_ex(&input, &mut groups).unwrap();
    assert_eq!(c, head);
    assert_eq!(g, &[GroupAffinity::new(0, 3), GroupAffinity::new(1, 1)]);
    let r = create_ex_request(&c, Some(0x2000), true);
    assert_eq!(r.group_count, 2);
    assert_eq!(
        r.flags,
        CALLER_SYSTEM_PROFILE_PRIVILEGE | CREATE_PER_PROCESS
    );

    let mut groups = [GroupAffinity::default(); 32];
    assert_eq!(
        parse_create_ex(&input[..72], &mut groups).map(|_| ()),
        Err(NtStatus::INFO_LENGTH_MISMATCH)
    );
    let many = CreateExIn {
        group_count: 33,
        ..head
    };
    assert_eq!(
        parse_create_ex(&to_bytes::<_, 56>(&many), &mut groups).map(|_| ()),
        Err(NtStatus::INVALID_PARAMETER)
    );
    assert_eq!(
        parse_create_ex(&input[..40], &mut groups).map(|_| ()),
        Err(NtStatus::INFO_LENGTH_MISMATCH)
    );
}

#[test]
fn output_lengths() {
    assert_eq!(check_output(16, 16), Ok(()));
    assert_eq!(check_output(15, 16), Err(NtStatus::BUFFER_TOO_SMALL));
}
