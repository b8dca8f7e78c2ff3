//! The symbol readers `hvprof report` runs on files the user names (user input): ELF with
//! its DWARF line table and inlined functions (what `--annotate` reads), PE exports and
//! CodeView record, PDB publics and procedures. The
//! first byte picks the reader. They must never panic: a file they cannot read is an error.
//! Lookups in whatever module comes back must not panic either. It uses the report crate
//! alone, so it links no VMM code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use report::symbols::{elf, pdb, pe, Module, Symbols};

fn probe(module: Module) {
    let symbols = Symbols::from_module(module.placed_at(0x1000));
    for addr in [0, 0x1000, 0x1fff, 0x2000, 0x10_0000, u64::MAX] {
        if let Some(hit) = symbols.resolve(addr) {
            let _ = (hit.describe(), hit.function(), hit.source());
        }
        let _ = symbols.describe(addr);
        if let Some(m) = symbols.module_at(addr) {
            let _ = m.code_at(addr);
        }
    }
    for m in symbols.modules() {
        for rva in [0, 0x3, 0x10, 0xfff] {
            let chain = m.lines.inlined(rva);
            assert!(chain.len() <= 64, "nesting past its bound");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    let module = match kind % 3 {
        0 => elf::read("fuzz.elf", bytes).map(|mut m| {
            elf::add_inlines(&mut m, bytes);
            m
        }),
        1 => {
            let _ = pe::pdb_ref(bytes);
            pe::read("fuzz.dll", bytes, None)
        }
        _ => {
            let _ = pdb::id(bytes);
            pdb::read("fuzz.pdb", bytes)
        }
    };
    if let Ok(m) = module {
        probe(m);
    }
});
