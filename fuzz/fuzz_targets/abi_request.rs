//! The hypercall request parser on arbitrary bytes (what the VMM runs on guest memory): the
//! header check and the whole-block decoder must never panic, and everything a decoded request
//! borrows (group array, page list) must lie within the declared length and the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profile_core::abi::{
    decode_header, decode_reply, decode_request, CreateExRequest, InfoReply, PageListHeader,
    Request, StartBuffer, StartRequest, StatsReply, Wire, HEADER_SIZE,
};
use profile_core::affinity::GroupAffinity;

fuzz_target!(|data: &[u8]| {
    let header = decode_header(data);
    match decode_request(data) {
        Ok((h, request)) => {
            assert_eq!(header, Ok(h), "decode_request agrees with decode_header");
            let length = h.length as usize;
            assert!(length <= data.len() && length >= HEADER_SIZE);
            match request {
                Request::CreateEx(_, groups) => {
                    let used =
                        HEADER_SIZE + CreateExRequest::SIZE + groups.len() * GroupAffinity::SIZE;
                    assert!(used <= length);
                    assert_eq!(groups.iter().count(), groups.len());
                    assert!(groups.get(groups.len()).is_none());
                }
                Request::Start(_, StartBuffer::PageList(list)) => {
                    let count = list.page_count();
                    let used = HEADER_SIZE
                        + StartRequest::SIZE
                        + PageListHeader::SIZE
                        + count as usize * 8;
                    assert!(used <= length);
                    assert!(count > 0 && list.offset_in_first_page() < 4096);
                    assert_eq!(list.frames().count(), count as usize);
                    assert!(list.frame(count - 1).is_some());
                    assert!(list.frame(count).is_none());
                }
                _ => {}
            }
        }
        Err(status) => {
            if let Err(header_status) = header {
                assert_eq!(status, header_status, "header errors come first");
            }
        }
    }
    // The agent's side parses the VMM's replies with the same care.
    let _ = decode_reply::<InfoReply>(data);
    let _ = decode_reply::<StatsReply>(data);
});
