//! hvprof's qcow2 header check (run before imago reads an image) on arbitrary bytes, a hostile
//! image's first bytes: it must never panic, and a header it accepts must keep its cluster
//! size, virtual size and L1 table within qcow2's limits and the table inside the file. The
//! file's length is the input's, or, for inputs longer than the header, the last 8 bytes
//! (big-endian), so lengths far beyond the bytes are tried too.
#![no_main]

use devices::virtio::block::qcow2_header::{check, CLUSTER_BITS, HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let (header, len) = if data.len() > HEADER_BYTES + 8 {
        let (h, tail) = data.split_at(data.len() - 8);
        (h, be64(tail, 0))
    } else {
        (data, data.len() as u64)
    };
    if check(header, len).is_err() {
        return;
    }
    let cluster_bits = be32(header, 20);
    assert!(CLUSTER_BITS.contains(&cluster_bits));
    let size = be64(header, 24);
    assert!(size <= 1 << 61);
    let l1_entries = u64::from(be32(header, 36));
    let l1_offset = be64(header, 40);
    assert!(l1_offset.is_multiple_of(1 << cluster_bits));
    if l1_entries > 0 {
        assert!(l1_offset < len);
        let end = l1_offset.checked_add(l1_entries * 8).unwrap();
        assert!(end <= len.saturating_add(1 << cluster_bits));
    }
    // The L1 table maps the whole disk.
    assert!(l1_entries << (2 * cluster_bits - 3) >= size);
});
