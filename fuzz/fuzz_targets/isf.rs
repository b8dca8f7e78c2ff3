//! The ISF reader (report::symbols::types::isf): Volatility symbol tables given with
//! --guest-types or found in a symbol pack, plain, xz or gzip (told apart by their first
//! bytes). Whoever put the file there controls every byte. The reader must never panic, loop
//! or decompress past its bound: a file it cannot read is an error, and a layout that comes
//! back has passed validation; a Linux table's banner (what a Linux pack is matched by) is
//! bounded. It uses the report crate alone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use report::symbols::pdb::PdbId;
use report::symbols::types::isf;

/// How much a fuzzed file may decompress to (the reader's own bound is 256 MiB, too slow to
/// reach for every input).
const LIMIT: u64 = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    let Ok(json) = isf::compressed::unpack(bytes, LIMIT) else {
        return;
    };
    assert!(u64::try_from(json.len()).unwrap() <= LIMIT);
    if let Ok(banner) = isf::banner::linux_banner(&json) {
        assert!(banner.text.len() <= isf::banner::MAX_BANNER_BYTES);
        assert_eq!(isf::banner::trim(&banner.text), banner.text.as_slice());
    }
    if kind % 2 == 1 {
        let id = PdbId {
            guid: "BBED7C2955FBE4522AAA23F4B8677AD9".into(),
            age: 1,
        };
        if let Ok(l) = isf::windows_layout_for(&json, "ntkrnlmp.pdb", &id) {
            assert!(l.validate().is_ok());
        }
        return;
    }
    let Ok(table) = isf::parse(&json) else {
        return;
    };
    if let Ok(l) = isf::windows_layout(&table) {
        assert!(l.validate().is_ok());
    }
    if let Ok(l) = isf::linux_layout(&table) {
        assert!(l.validate().is_ok());
    }
});
