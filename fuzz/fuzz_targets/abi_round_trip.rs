//! Encoding then decoding a request gives back what was encoded: every fixed-size call, a
//! create-ex with its groups and a page-list start, with field values taken from the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profile_core::abi::*;
use profile_core::affinity::GroupAffinity;
use profile_core::NtStatus;

/// Encodes `body` for `call`, decodes it, and returns the decoded request (None when the
/// decoder rejects a field value, which must then be a parameter error).
fn round_trip<'a, T: Wire>(call: u32, body: &T, out: &'a mut [u8]) -> Option<Request<'a>> {
    let n = encode_request(call, body, out).expect("a body of the right type encodes");
    match decode_request(&out[..n]) {
        Ok((header, request)) => {
            assert_eq!(
                (header.version, header.call, header.length as usize),
                (ABI_VERSION, call, n)
            );
            Some(request)
        }
        Err(status) => {
            assert_eq!(
                status,
                NtStatus::INVALID_PARAMETER,
                "lengths are right by construction"
            );
            None
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (selector, rest) = match data.split_first() {
        Some(x) => x,
        None => return,
    };
    let mut out = vec![0u8; 1 << 16];
    match selector % 8 {
        0 => {
            if let Some(b) = CreateRequest::decode(rest) {
                if let Some(r) = round_trip(CALL_CREATE, &b, &mut out) {
                    assert_eq!(r, Request::Create(b));
                }
            }
        }
        1 => {
            if let Some(b) = HandleRequest::decode(rest) {
                if let Some(r) = round_trip(CALL_STOP, &b, &mut out) {
                    assert_eq!(r, Request::Stop(b));
                }
                if let Some(r) = round_trip(CALL_CLOSE, &b, &mut out) {
                    assert_eq!(r, Request::Close(b));
                }
            }
        }
        2 => {
            if let Some(b) = SetIntervalRequest::decode(rest) {
                if let Some(r) = round_trip(CALL_SET_INTERVAL, &b, &mut out) {
                    assert_eq!(r, Request::SetInterval(b));
                }
            }
        }
        3 => {
            if let Some(b) = QueryIntervalRequest::decode(rest) {
                if let Some(r) = round_trip(CALL_QUERY_INTERVAL, &b, &mut out) {
                    assert_eq!(r, Request::QueryInterval(b));
                }
            }
        }
        4 => {
            if let Some(b) = SetInterruptRequest::decode(rest) {
                if let Some(r) = round_trip(CALL_SET_INTERRUPT, &b, &mut out) {
                    assert_eq!(r, Request::SetInterrupt(b));
                }
            }
        }
        5 => {
            // encode_request is for starts without a trailing page list (case 7 covers those).
            if let Some(b) = StartRequest::decode(rest).filter(|b| b.mode != START_MODE_PAGE_LIST) {
                if let Some(r) = round_trip(CALL_START, &b, &mut out) {
                    match r {
                        Request::Start(got, StartBuffer::GuestVirtual { va, cr3 }) => {
                            assert_eq!((got, va, cr3), (b, b.buffer_va, b.cr3));
                        }
                        other => panic!("start decoded as {other:?}"),
                    }
                }
            }
        }
        6 => {
            let body = match CreateExRequest::decode(rest) {
                Some(b) => b,
                None => return,
            };
            let groups: Vec<GroupAffinity> = rest[CreateExRequest::SIZE..]
                .chunks_exact(GroupAffinity::SIZE)
                .filter_map(GroupAffinity::decode)
                .take(32)
                .collect();
            let n = encode_create_ex(&body, &groups, &mut out).expect("fits");
            if let Ok((_, Request::CreateEx(got, list))) = decode_request(&out[..n]) {
                let mut want = body;
                want.group_count = groups.len() as u16;
                assert_eq!(got, want);
                assert_eq!(list.iter().collect::<Vec<_>>(), groups);
            }
        }
        _ => {
            if rest.len() < 8 {
                return;
            }
            let handle = u32::from_le_bytes(rest[..4].try_into().unwrap());
            let offset = u32::from_le_bytes(rest[4..8].try_into().unwrap());
            let frames: Vec<u64> = rest[8..]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let n = encode_start_page_list(handle, offset, &frames, &mut out).expect("fits");
            match decode_request(&out[..n]) {
                Ok((_, Request::Start(r, StartBuffer::PageList(list)))) => {
                    assert_eq!(r.handle, handle);
                    assert_eq!(list.offset_in_first_page(), offset);
                    assert_eq!(list.frames().collect::<Vec<_>>(), frames);
                }
                Ok((_, other)) => panic!("page-list start decoded as {other:?}"),
                Err(status) => {
                    assert!(frames.is_empty() || offset >= 4096, "{status:?}");
                }
            }
        }
    }
});
