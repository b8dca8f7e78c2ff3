//! The guest-kernel type readers (report::symbols::types): a PDB's type stream and symbols, a
//! BTF blob, an ELF file's .BTF or DWARF. The guest (or whoever put the file on the symbol
//! path) controls every byte; the first byte picks the reader. They must never panic nor loop:
//! a file they cannot read is an error, and a layout that comes back has passed validation.
//! It uses the report crate alone, so it links no VMM code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use report::symbols::types::{btf, linux_layout_from_elf, pdb};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(l) = pdb::windows_layout(bytes) {
                assert!(l.validate().is_ok());
            }
        }
        1 => {
            if let Ok(l) = btf::linux_layout(bytes) {
                assert!(l.validate().is_ok());
            }
        }
        _ => {
            if let Ok(l) = linux_layout_from_elf(bytes) {
                assert!(l.validate().is_ok());
            }
        }
    }
});
