//! A Linux address space's maple tree of VMAs, and the paths of the files they map, read over
//! arbitrary kernel bytes: the read must end (bounded in nodes, height and mappings; a path in
//! names and bytes), never panic, and give mappings in increasing, non-overlapping order, each
//! with a path of bounded length. The bytes are a kernel heap whose start is the `mm_struct`.
//! The same bytes, as the first page of a mapped file, go to the build-id reader: an id
//! comes back only as 1 to `MAX_BUILD_ID` bytes of the input.
#![no_main]

use introspect::os::linux::build_id::{build_id, MAX_BUILD_ID};
use introspect::os::linux::maps::{mappings, MAX_MAPPINGS, MAX_NAME, MAX_PATH_DEPTH};
use introspect::testguest::linux_maps::{layout, HEAP, MM};
use introspect::Regions;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(id) = build_id(data) {
        assert!((1..=MAX_BUILD_ID).contains(&id.len()));
        assert!(data.windows(id.len()).any(|w| w == id.as_slice()));
    }
    let mut mem = Regions::new().with(HEAP, data.to_vec());
    let Ok(m) = mappings(&mut mem, &layout(), MM) else {
        return;
    };
    assert!(m.mappings.len() <= MAX_MAPPINGS);
    let mut last_end = 0;
    for (i, map) in m.mappings.iter().enumerate() {
        assert!(map.start < map.end, "{map:?}");
        assert!(
            i == 0 || map.start >= last_end,
            "{map:?} overlaps the one before"
        );
        last_end = map.end;
        if let Some(p) = &map.path {
            assert!(
                p.len() <= 1 + MAX_PATH_DEPTH * (MAX_NAME * 3 + 1),
                "{}",
                p.len()
            );
        }
        assert_eq!(m.find(map.start).map(|x| x.start), Some(map.start));
    }
});
