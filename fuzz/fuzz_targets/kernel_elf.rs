//! The kernel ELF reader (program headers, segments, the PVH note) on arbitrary bytes: it must
//! never panic, and every segment it returns must lie inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmm::boot::elf;

fuzz_target!(|data: &[u8]| {
    if let Ok(img) = elf::parse(data) {
        for s in &img.segments {
            assert!(s.file_offset + s.file_size <= data.len());
            assert!(s.mem_size >= s.file_size as u64);
        }
    }
});
