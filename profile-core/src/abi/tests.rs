//! ABI tests: layouts, discovery, parsing errors, and the worked examples of docs/abi.md (the
//! test fails if the document's hex dumps differ from what the codec produces).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::Write;
use core::mem::{offset_of, size_of};

use super::cpuid::*;
use super::*;
use crate::affinity::{GroupAffinity, KAFFINITY_ALL};
use crate::NtStatus;

/// "oooo: xx xx ..." lines of 16 bytes.
pub(crate) fn dump(bytes: &[u8]) -> String {
    let mut s = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(s, "{:04x}:", i * 16);
        for b in chunk {
            let _ = write!(s, " {:02x}", b);
        }
        s.push('\n');
    }
    s
}

fn block(len: usize) -> Vec<u8> {
    vec![0xCC; len]
}

fn reply<T: Wire>(mut req: Vec<u8>, status: NtStatus, body: &T) -> Vec<u8> {
    let range = encode_reply(&mut req, status, body).unwrap();
    req.truncate(range.end);
    req
}

/// (name, request block, block after the reply) for each worked example.
pub(crate) fn examples() -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut b = block(64);
    let n = encode_request(CALL_QUERY_INFO, &Empty, &mut b).unwrap();
    b.truncate(n);
    let info = InfoReply {
        abi_version: 1,
        processor_count: 4,
        features: FEATURE_START_GUEST_VIRTUAL | FEATURE_STATISTICS,
        max_page_count: MAX_PAGE_COUNT,
        supported_sources: 1,
        started_limit: 4 * 8192,
        max_groups: 32,
        max_request_len: MAX_REQUEST_LEN,
        reserved: 0,
    };
    out.push(("query_info", b.clone(), reply(b, NtStatus::SUCCESS, &info)));

    let create = CreateRequest {
        process_cr3: 0x0000_0000_001A_B000,
        base: 0x0000_7FF6_1234_0000,
        size: 0x1_0000,
        buffer: 0x0000_0000_001F_0000,
        buffer_size: 0x4000,
        bucket_size: 4,
        source: 0,
        flags: CREATE_PER_PROCESS | CALLER_SYSTEM_PROFILE_PRIVILEGE,
        desired_access: 1,
        group: 0,
        reserved0: 0,
        affinity: KAFFINITY_ALL,
    };
    let mut b = block(128);
    let n = encode_request(CALL_CREATE, &create, &mut b).unwrap();
    b.truncate(n);
    let created = CreateReply {
        handle: 4,
        reserved: 0,
        object_id: 1,
    };
    out.push(("create", b.clone(), reply(b, NtStatus::SUCCESS, &created)));

    let create_ex = CreateExRequest {
        process_cr3: 0,
        base: 0xFFFF_F800_0000_0000,
        size: 0x20_0000,
        buffer: 0xFFFF_C000_0001_0000,
        buffer_size: 0x800,
        bucket_size: 12,
        source: 0,
        flags: CALLER_SYSTEM_PROFILE_PRIVILEGE,
        desired_access: 1,
        group_count: 1,
        reserved0: 0,
        reserved1: 0,
    };
    let mut b = block(128);
    let n = encode_create_ex(&create_ex, &[GroupAffinity::new(0, 0x3)], &mut b).unwrap();
    b.truncate(n);
    let created = CreateReply {
        handle: 8,
        reserved: 0,
        object_id: 2,
    };
    out.push((
        "create_ex",
        b.clone(),
        reply(b, NtStatus::SUCCESS, &created),
    ));

    let mut b = block(128);
    let n = encode_start_page_list(4, 0, &[0x1234, 0x1235, 0x2000, 0x2001], &mut b).unwrap();
    b.truncate(n);
    let pinned = StartReply {
        pinned_pages: 4,
        reserved: 0,
    };
    out.push((
        "start_page_list",
        b.clone(),
        reply(b, NtStatus::SUCCESS, &pinned),
    ));

    let start_va = StartRequest {
        handle: 8,
        mode: START_MODE_GUEST_VIRTUAL,
        buffer_va: 0xFFFF_C000_0001_0000,
        cr3: 0x0000_0000_001A_D000,
    };
    let mut b = block(64);
    let n = encode_request(CALL_START, &start_va, &mut b).unwrap();
    b.truncate(n);
    let pinned = StartReply {
        pinned_pages: 1,
        reserved: 0,
    };
    out.push((
        "start_guest_virtual",
        b.clone(),
        reply(b.clone(), NtStatus::SUCCESS, &pinned),
    ));

    let again = b.clone();
    let failed = reply(again.clone(), NtStatus::PROFILING_NOT_STOPPED, &pinned);
    out.push(("start_again_fails", again, failed));

    let h4 = HandleRequest {
        handle: 4,
        reserved: 0,
    };
    for (name, call) in [("stop", CALL_STOP), ("close", CALL_CLOSE)] {
        let mut b = block(64);
        let n = encode_request(call, &h4, &mut b).unwrap();
        b.truncate(n);
        out.push((name, b.clone(), reply(b, NtStatus::SUCCESS, &Empty)));
    }

    let set = SetIntervalRequest {
        source: 0,
        interval: 500,
        flags: CALLER_SYSTEM_PROFILE_PRIVILEGE,
        reserved: 0,
    };
    let mut b = block(64);
    let n = encode_request(CALL_SET_INTERVAL, &set, &mut b).unwrap();
    b.truncate(n);
    let clamped = IntervalReply {
        interval: 1000,
        reserved: 0,
    };
    out.push((
        "set_interval",
        b.clone(),
        reply(b, NtStatus::SUCCESS, &clamped),
    ));

    let query = QueryIntervalRequest {
        source: 0,
        reserved: 0,
    };
    let mut b = block(64);
    let n = encode_request(CALL_QUERY_INTERVAL, &query, &mut b).unwrap();
    b.truncate(n);
    let current = IntervalReply {
        interval: 39_063,
        reserved: 0,
    };
    out.push((
        "query_interval",
        b.clone(),
        reply(b, NtStatus::SUCCESS, &current),
    ));

    let irq = SetInterruptRequest {
        vcpu: ALL_VCPUS,
        vector: 0xFE,
        flags: INTERRUPT_ENABLE,
        reserved: 0,
    };
    let mut b = block(64);
    let n = encode_request(CALL_SET_INTERRUPT, &irq, &mut b).unwrap();
    b.truncate(n);
    out.push((
        "set_interrupt",
        b.clone(),
        reply(b, NtStatus::SUCCESS, &Empty),
    ));

    let mut b = block(64);
    let n = encode_request(CALL_READ_STATS, &Empty, &mut b).unwrap();
    b.truncate(n);
    let stats = StatsReply {
        samples: 1000,
        counted_samples: 990,
        counts: 1980,
        dropped_samples: 3,
        injected_interrupts: 0,
        objects_open: 2,
        objects_started: 2,
    };
    out.push(("read_stats", b.clone(), reply(b, NtStatus::SUCCESS, &stats)));
    out
}

#[test]
fn worked_examples_in_abi_md_match_the_codec() {
    let doc = include_str!("../../../docs/abi.md");
    for (name, request, after) in examples() {
        let decoded = decode_request(&request);
        assert!(decoded.is_ok(), "{}: {:?}", name, decoded);
        for (what, bytes) in [("request", &request), ("reply", &after)] {
            let d = dump(bytes);
            assert!(
                doc.contains(&d),
                "docs/abi.md lacks the {} {} dump:\n{}",
                name,
                what,
                d
            );
        }
    }
}

#[test]
#[ignore = "prints the worked examples for docs/abi.md"]
fn print_worked_examples() {
    extern crate std;
    for (name, request, after) in examples() {
        std::println!(
            "### {}\nrequest:\n{}reply:\n{}",
            name,
            dump(&request),
            dump(&after)
        );
    }
}

#[test]
fn cpuid_signature_spells_hvprofhvprof() {
    let base = base_leaf();
    let mut sig = [0u8; 12];
    sig[..4].copy_from_slice(&base.ebx.to_le_bytes());
    sig[4..8].copy_from_slice(&base.ecx.to_le_bytes());
    sig[8..].copy_from_slice(&base.edx.to_le_bytes());
    assert_eq!(&sig, b"hvprofhvprof");
    assert_eq!(base.eax, 0x4000_0101);
    let info = info_leaf(DOORBELL_PORT_BASE, FEATURE_STATISTICS);
    let found = discover(&base, &info).unwrap();
    assert_eq!(
        (found.abi_version, found.port_base, found.features),
        (1, 0x6A0, 4)
    );
    assert_eq!(discover(&CpuidRegs::default(), &info), None);
}

#[test]
fn doorbell_magic_is_hvpf() {
    assert_eq!(DOORBELL_MAGIC.to_le_bytes(), *b"hvpf");
    assert_eq!(DOORBELL_MAGIC, 0x6670_7668);
}

#[test]
fn layouts_match_repr_c_offsets() {
    assert_eq!(size_of::<Header>(), 16);
    assert_eq!(offset_of!(Header, length), 8);
    assert_eq!(offset_of!(Header, status), 12);
    assert_eq!(offset_of!(CreateRequest, buffer_size), 32);
    assert_eq!(offset_of!(CreateRequest, desired_access), 48);
    assert_eq!(offset_of!(CreateRequest, group), 52);
    assert_eq!(offset_of!(CreateRequest, affinity), 56);
    assert_eq!(offset_of!(CreateExRequest, group_count), 52);
    assert_eq!(offset_of!(CreateExRequest, reserved1), 56);
    assert_eq!(offset_of!(CreateReply, object_id), 8);
    assert_eq!(offset_of!(StartRequest, cr3), 16);
    assert_eq!(offset_of!(InfoReply, supported_sources), 16);
    assert_eq!(offset_of!(InfoReply, max_request_len), 32);
    assert_eq!(offset_of!(StatsReply, objects_open), 40);
    assert_eq!(size_of::<GroupAffinity>(), 16);
    assert_eq!(offset_of!(GroupAffinity, group), 8);
    assert_eq!(MAX_REQUEST_LEN, 524_344);
}

fn valid_create() -> Vec<u8> {
    examples().into_iter().find(|e| e.0 == "create").unwrap().1
}

fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn decode_rejects_short_blocks_bad_versions_and_unknown_calls() {
    let b = valid_create();
    assert_eq!(
        decode_request(&b[..15]).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
    assert_eq!(
        decode_request(&b[..40]).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
    let mut v = b.clone();
    set_u32(&mut v, 0, 2);
    assert_eq!(decode_request(&v).unwrap_err(), NtStatus::REVISION_MISMATCH);
    let mut c = b.clone();
    set_u32(&mut c, 4, 99);
    assert_eq!(decode_request(&c).unwrap_err(), NtStatus::NOT_IMPLEMENTED);
    let mut l = b.clone();
    set_u32(&mut l, 8, 79);
    assert_eq!(
        decode_request(&l).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
    set_u32(&mut l, 8, MAX_REQUEST_LEN + 1);
    assert_eq!(
        decode_header(&l).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
}

#[test]
fn decode_rejects_reserved_fields_and_unknown_flags() {
    let b = valid_create();
    let mut r = b.clone();
    r[16 + 54] = 1; // reserved0
    assert_eq!(decode_request(&r).unwrap_err(), NtStatus::INVALID_PARAMETER);
    let mut f = b.clone();
    set_u32(&mut f, 16 + 44, 0x100);
    assert_eq!(decode_request(&f).unwrap_err(), NtStatus::INVALID_PARAMETER);
    let mut g = b;
    set_u32(&mut g, 16 + 44, 0); // global, but process_cr3 nonzero
    assert_eq!(decode_request(&g).unwrap_err(), NtStatus::INVALID_PARAMETER);
}

#[test]
fn decode_create_ex_checks_group_count_and_array_length() {
    let b = examples()
        .into_iter()
        .find(|e| e.0 == "create_ex")
        .unwrap()
        .1;
    match decode_request(&b).unwrap().1 {
        Request::CreateEx(r, groups) => {
            assert_eq!(r.group_count, 1);
            assert_eq!(groups.get(0), Some(GroupAffinity::new(0, 3)));
        }
        other => panic!("{:?}", other),
    }
    let mut many = b.clone();
    many[16 + 52] = 33;
    assert_eq!(
        decode_request(&many).unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    let mut two = b;
    two[16 + 52] = 2;
    assert_eq!(
        decode_request(&two).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
}

#[test]
fn page_list_rules() {
    let b = examples()
        .into_iter()
        .find(|e| e.0 == "start_page_list")
        .unwrap()
        .1;
    let list = match decode_request(&b).unwrap().1 {
        Request::Start(_, StartBuffer::PageList(list)) => list,
        other => panic!("{:?}", other),
    };
    assert_eq!(
        list.frames().collect::<Vec<_>>(),
        vec![0x1234, 0x1235, 0x2000, 0x2001]
    );
    assert_eq!(list.check_covers(0x1F_0000, 0x4000), Ok(()));
    assert_eq!(
        list.check_covers(0x1F_0000, 0x4001),
        Err(NtStatus::INVALID_PARAMETER)
    );
    assert_eq!(
        list.check_covers(0x1F_0004, 0x3FFC),
        Err(NtStatus::INVALID_PARAMETER)
    );
    assert_eq!(pages_spanned(0xFFC, 8), 2);
    assert_eq!(pages_spanned(0x1000, 0x1000), 1);
    let mut offset = b.clone();
    set_u32(&mut offset, 40, 4096);
    assert_eq!(
        decode_request(&offset).unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    let mut none = b.clone();
    set_u32(&mut none, 44, 0);
    assert_eq!(
        decode_request(&none).unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    let mut more = b.clone();
    set_u32(&mut more, 44, 5);
    assert_eq!(
        decode_request(&more).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
    let mut huge = b.clone();
    set_u32(&mut huge, 44, MAX_PAGE_COUNT + 1);
    assert_eq!(
        decode_request(&huge).unwrap_err(),
        NtStatus::INSUFFICIENT_RESOURCES
    );
    let mut mode = b;
    set_u32(&mut mode, 20, 7);
    assert_eq!(
        decode_request(&mode).unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
}

#[test]
fn set_interrupt_vector_rules() {
    let b = examples()
        .into_iter()
        .find(|e| e.0 == "set_interrupt")
        .unwrap()
        .1;
    assert!(decode_request(&b).is_ok());
    let mut low = b.clone();
    set_u32(&mut low, 20, 0x1F);
    assert_eq!(
        decode_request(&low).unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    let mut off = b;
    set_u32(&mut off, 24, 0);
    assert_eq!(
        decode_request(&off).unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    set_u32(&mut off, 20, 0);
    assert!(decode_request(&off).is_ok());
}

#[test]
fn replies_round_trip_and_errors_write_only_the_status() {
    for (name, _, after) in examples() {
        let status = NtStatus(u32::from_le_bytes([
            after[12], after[13], after[14], after[15],
        ]));
        if status.is_success() {
            assert_eq!(
                after.len(),
                16 + reply_size(u32::from(after[4])).unwrap(),
                "{}",
                name
            );
        } else {
            assert_eq!(after.len(), 16);
            assert_eq!(decode_reply::<StartReply>(&after), Err(status));
        }
    }
    let (_, _, info) = examples().remove(0);
    assert_eq!(decode_reply::<InfoReply>(&info).unwrap().processor_count, 4);
}

#[test]
fn convert_create_request_to_params() {
    let b = valid_create();
    let r = match decode_request(&b).unwrap().1 {
        Request::Create(r) => r,
        other => panic!("{:?}", other),
    };
    let p = r.to_params(crate::Owner(1), true);
    assert_eq!(p.process, Some(0x1A_B000));
    assert!(p.caller.system_profile_privilege && !p.caller.restricted);
    let mut m: crate::ObjectManager<u32> =
        crate::ObjectManager::new(crate::PlatformInfo::timer_only(4)).unwrap();
    let h = m.create(&p, r.group, r.affinity).unwrap();
    assert_eq!(h.0, 4);
}

#[test]
fn pages_spanned_does_not_overflow_near_u64_max() {
    // Was `(offset + size + 4095) >> 12`: overflowed (a panic in debug builds, a wrong count
    // in release) for sizes within 8 KiB of u64::MAX. Found writing the abi_page_list target.
    assert_eq!(pages_spanned(0, u64::MAX), 1 << 52);
    assert_eq!(pages_spanned(0xFFF, u64::MAX), (1 << 52) + 1);
    assert_eq!(pages_spanned(0x800, u64::MAX - 0x7FF), 1 << 52);
    assert_eq!(pages_spanned(0xFFF, 1), 1);
    assert_eq!(pages_spanned(0xFFF, 2), 2);
    for (va, size) in [
        (0u64, 1u64),
        (0xFFC, 8),
        (0x1000, 0x1000),
        (0x1234, 0x10_0000),
    ] {
        assert_eq!(pages_spanned(va, size), ((va & 0xFFF) + size + 0xFFF) >> 12);
    }
}

#[test]
fn create_fields_build_both_bodies_with_reserved_fields_zero() {
    let f = CreateFields {
        process_cr3: 0x1000,
        base: 0x40_0000,
        size: 0x1_0000,
        buffer: 0x8000,
        buffer_size: 0x1000,
        bucket_size: 4,
        source: 2,
        flags: CREATE_PER_PROCESS,
        desired_access: 1,
    };
    let c = f.create(1, 0b110);
    assert_eq!(
        (
            c.process_cr3,
            c.base,
            c.size,
            c.buffer,
            c.buffer_size,
            c.bucket_size
        ),
        (0x1000, 0x40_0000, 0x1_0000, 0x8000, 0x1000, 4)
    );
    assert_eq!(
        (c.source, c.flags, c.desired_access),
        (2, CREATE_PER_PROCESS, 1)
    );
    assert_eq!((c.group, c.affinity, c.reserved0), (1, 0b110, 0));
    let e = f.create_ex(3);
    assert_eq!(
        (e.base, e.size, e.flags, e.group_count),
        (0x40_0000, 0x1_0000, CREATE_PER_PROCESS, 3)
    );
    assert_eq!((e.reserved0, e.reserved1), (0, 0));
}

fn example(name: &str) -> Vec<u8> {
    examples().into_iter().find(|e| e.0 == name).unwrap().1
}

/// docs/abi.md 6.8: QUERY_INTERVAL succeeds for every source, but only once the request is
/// well formed: a nonzero `reserved` is INVALID_PARAMETER like any other reserved field.
#[test]
fn query_interval_succeeds_for_any_source_but_rejects_nonzero_reserved() {
    let mut b = example("query_interval");
    set_u32(&mut b, 16, 0x1234); // a source nobody supports: still well formed
    assert!(matches!(
        decode_request(&b).unwrap().1,
        Request::QueryInterval(_)
    ));
    set_u32(&mut b, 20, 1);
    assert_eq!(decode_request(&b).unwrap_err(), NtStatus::INVALID_PARAMETER);
}

/// docs/abi.md 6.7: SET_INTERVAL takes only CALLER_SYSTEM_PROFILE_PRIVILEGE; any other flag bit,
/// CREATE_PER_PROCESS and CALLER_RESTRICTED included, is INVALID_PARAMETER.
#[test]
fn set_interval_rejects_every_flag_but_the_privilege() {
    let b = example("set_interval");
    for flag in [CREATE_PER_PROCESS, CALLER_RESTRICTED, 1 << 3, 1 << 31] {
        let mut f = b.clone();
        set_u32(&mut f, 24, CALLER_SYSTEM_PROFILE_PRIVILEGE | flag);
        assert_eq!(
            decode_request(&f).unwrap_err(),
            NtStatus::INVALID_PARAMETER,
            "flag {flag:#x}"
        );
    }
    let mut none = b;
    set_u32(&mut none, 24, 0); // no privilege: well formed, refused later (PRIVILEGE_NOT_HELD)
    assert!(decode_request(&none).is_ok());
}

/// docs/abi.md 6.2: a global object's `process_cr3` must be 0; a per-process object with
/// `process_cr3` 0 is accepted (it profiles the address space whose CR3 key is 0).
#[test]
fn global_objects_need_cr3_zero_and_per_process_accepts_cr3_zero() {
    let mut b = valid_create();
    b[16..24].fill(0);
    match decode_request(&b).unwrap().1 {
        Request::Create(r) => {
            assert_eq!(r.flags & CREATE_PER_PROCESS, CREATE_PER_PROCESS);
            let p = r.to_params(crate::Owner(1), true);
            assert_eq!(p.process, Some(0));
        }
        other => panic!("{:?}", other),
    }
    let mut g = valid_create();
    set_u32(&mut g, 16 + 44, CALLER_SYSTEM_PROFILE_PRIVILEGE);
    assert_eq!(decode_request(&g).unwrap_err(), NtStatus::INVALID_PARAMETER);
    g[16..24].fill(0);
    assert!(decode_request(&g).is_ok());
}

/// docs/abi.md 6.3: `length` below 80 fails the header check first; with `length` >= 80, a
/// `group_count` above 32 is INVALID_PARAMETER whatever `length` says, and only a count of
/// 0..=32 is then measured against `length`.
#[test]
fn create_ex_group_count_above_32_wins_over_the_array_length() {
    let b = example("create_ex");
    let mut short = b[..80].to_vec();
    set_u32(&mut short, 8, 80);
    short[16 + 52] = 33;
    assert_eq!(
        decode_request(&short).unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    short[16 + 52] = 32;
    assert_eq!(
        decode_request(&short).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
    set_u32(&mut short, 8, 79);
    short[16 + 52] = 33;
    assert_eq!(
        decode_request(&short).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
}

/// docs/abi.md 6.4: `page_count` above 65,537 is INSUFFICIENT_RESOURCES even when the list
/// would also run past `length`; a list of 1..=65,537 frames running past it is
/// INFO_LENGTH_MISMATCH. Mode 0's frames are not compared with anything at parsing, and a
/// list naming one frame twice covers a buffer like any other.
#[test]
fn page_count_limit_wins_over_the_list_length_and_duplicates_are_allowed() {
    let b = example("start_page_list");
    let mut huge = b[..48].to_vec();
    set_u32(&mut huge, 8, 48);
    set_u32(&mut huge, 44, MAX_PAGE_COUNT + 1);
    assert_eq!(
        decode_request(&huge).unwrap_err(),
        NtStatus::INSUFFICIENT_RESOURCES
    );
    set_u32(&mut huge, 44, MAX_PAGE_COUNT);
    assert_eq!(
        decode_request(&huge).unwrap_err(),
        NtStatus::INFO_LENGTH_MISMATCH
    );
    let mut dup = b;
    dup[56..64].copy_from_slice(&0x1234u64.to_le_bytes());
    match decode_request(&dup).unwrap().1 {
        Request::Start(_, StartBuffer::PageList(list)) => {
            assert_eq!(
                list.frames().collect::<Vec<_>>(),
                vec![0x1234, 0x1234, 0x2000, 0x2001]
            );
            assert_eq!(list.check_covers(0x1F_0000, 0x4000), Ok(()));
        }
        other => panic!("{:?}", other),
    }
}
