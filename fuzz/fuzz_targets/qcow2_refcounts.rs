//! The qcow2 refcount check (after the header check, before imago opens an image) on an
//! arbitrary file held in memory: it must never panic or read without bound, and an image it
//! accepts must have a refcount block for its header cluster inside the file.
#![no_main]

use std::cell::Cell;

use devices::virtio::block::qcow2_header::HEADER_BYTES;
use devices::virtio::block::qcow2_refcounts::check;
use libfuzzer_sys::fuzz_target;

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let reads = Cell::new(0u64);
    let read = |offset: u64, buf: &mut [u8]| {
        reads.set(reads.get() + 1);
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(buf.len()).min(data.len());
        buf[..end - start].copy_from_slice(&data[start..end]);
        buf[end - start..].fill(0);
        Ok(())
    };
    let header = &data[..data.len().min(HEADER_BYTES)];
    let accepted = check(header, data.len() as u64, &read).unwrap().is_ok();
    // Two reads per cluster of the header, the refcount table (at most 8 MiB) and the L1
    // table (at most 32 MiB), with 512-byte clusters at the worst.
    assert!(reads.get() <= 2 * (1 + (8 << 20) / 512 + (32 << 20) / 512 + 1));
    if accepted {
        // The first refcount table entry (read as the check reads: zeroes past the end).
        let mut entry = [0u8; 8];
        read(be64(data, 48), &mut entry).unwrap();
        let block = u64::from_be_bytes(entry) & !0x1ff;
        assert!(block != 0 && block < data.len() as u64);
    }
});
