//! The Windows kernel's loaded-module list walked over arbitrary guest bytes: the walk must
//! end (bounded, cycle-safe), never panic, read only entries that are there, and keep names
//! within their limit. The bytes are pool memory whose first LIST_ENTRY is the list head.
#![no_main]

use introspect::nt::{walk_modules, ListEnd, MAX_MODULES};
use introspect::Regions;
use libfuzzer_sys::fuzz_target;

const POOL: u64 = 0xffff_a000_0000_0000;

fuzz_target!(|data: &[u8]| {
    let mut mem = Regions::new().with(POOL, data.to_vec());
    let list = walk_modules(&mut mem, POOL, MAX_MODULES);
    assert!(list.modules.len() <= MAX_MODULES);
    let end = POOL + data.len() as u64;
    for m in &list.modules {
        assert!(m.entry >= POOL && m.entry + 0x68 <= end, "{:#x}", m.entry);
        for name in [&m.name, &m.path].into_iter().flatten() {
            assert!(name.chars().count() <= 260);
        }
    }
    if list.end == ListEnd::Complete {
        // Every entry's Blink pointed back, so no entry was visited twice.
        let mut seen: Vec<u64> = list.modules.iter().map(|m| m.entry).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), list.modules.len());
    }
});
