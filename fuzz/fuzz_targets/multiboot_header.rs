//! The multiboot header search on arbitrary bytes: it must never panic, and an a.out load it
//! accepts must lie inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmm::boot::multiboot;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(h)) = multiboot::find_header(data) {
        assert!(h.offset + 12 <= data.len());
        if let Some(a) = h.aout {
            assert!(a.file_offset + a.load_size <= data.len());
        }
    }
});
