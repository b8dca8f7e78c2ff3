//! The locked-buffer page list on arbitrary bytes: parsing, frame access and the coverage check
//! against an arbitrary buffer must never panic, and a list that passes the check describes
//! exactly the buffer's pages.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profile_core::abi::{pages_spanned, PageList, PAGE_SIZE};

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let va = u64::from_le_bytes(data[..8].try_into().unwrap());
    let size = u32::from_le_bytes(data[8..12].try_into().unwrap());
    // Any 64-bit size (e.g. a guest-virtual range) must not overflow the page arithmetic.
    let wide = va.rotate_left(17) ^ u64::from(size);
    let pages = pages_spanned(va, wide);
    assert!(wide == 0 || pages >= 1);
    assert!(pages <= (wide >> 12) + 2);
    let list = match PageList::parse(&data[12..]) {
        Ok(list) => list,
        Err(_) => return,
    };
    let count = list.page_count();
    assert_eq!(list.frames().count(), count as usize);
    assert!(list.frame(count).is_none());
    if list.check_covers(va, size).is_ok() {
        assert_eq!(u64::from(list.offset_in_first_page()), va & (PAGE_SIZE - 1));
        assert_eq!(u64::from(count), pages_spanned(va, u64::from(size)));
    }
});
