use std::cell::Cell;

use super::*;
use crate::virtio::block::qcow2_header::QCOW2_MAGIC;

/// What `qemu-img create -f qcow2 IMG 64M` writes: the header, the refcount table at
/// 0x10000 (one entry: the refcount block at 0x20000), the refcount block (16-bit
/// refcounts of 1 for clusters 0-3) and the 8-byte L1 table at 0x30000.
fn image() -> Vec<u8> {
    let mut f = vec![0u8; 0x30008];
    f[..4].copy_from_slice(&QCOW2_MAGIC);
    put32(&mut f, 4, 3);
    put32(&mut f, 20, 16);
    put64(&mut f, 24, 64 << 20);
    put32(&mut f, 36, 1);
    put64(&mut f, 40, 0x30000);
    put64(&mut f, 48, 0x10000);
    put32(&mut f, 56, 1);
    put32(&mut f, 96, 4);
    put32(&mut f, 100, 112);
    put64(&mut f, 0x10000, 0x20000);
    for c in 0..4 {
        f[0x20000 + 2 * c + 1] = 1;
    }
    f
}

fn put32(f: &mut [u8], at: usize, v: u32) {
    f[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(f: &mut [u8], at: usize, v: u64) {
    f[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Checks the in-memory image `f`, counting reads.
fn run(f: &[u8]) -> (Result<(), HeaderError>, usize) {
    let reads = Cell::new(0);
    let read = |offset: u64, buf: &mut [u8]| {
        reads.set(reads.get() + 1);
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(f.len());
        let end = start.saturating_add(buf.len()).min(f.len());
        buf[..end - start].copy_from_slice(&f[start..end]);
        buf[end - start..].fill(0);
        Ok(())
    };
    let r = check(&f[..112], f.len() as u64, &read).unwrap();
    (r, reads.get())
}

#[test]
fn qemu_img_layout_passes_with_two_reads_per_cluster() {
    // The header, the refcount table and the L1 table: one cluster each.
    assert_eq!(run(&image()), (Ok(()), 6));
}

#[test]
fn a_bad_header_is_refused_before_anything_is_read() {
    let mut f = image();
    put32(&mut f, 20, 8);
    assert_eq!(run(&f), (Err(HeaderError::ClusterBits(8)), 0));
}

/// What made imago overwrite the header with a refcount block and overflow its stack.
#[test]
fn no_refcount_block_for_the_header_is_refused() {
    let mut f = image();
    put64(&mut f, 0x10000, 0);
    assert_eq!(
        run(&f).0,
        Err(HeaderError::NoRefcountBlock {
            what: "the header",
            cluster: 0,
            index: 0
        })
    );
    // Reserved bits 0-8 alone are not an offset either.
    put64(&mut f, 0x10000, 0x1ff);
    assert!(matches!(
        run(&f).0,
        Err(HeaderError::NoRefcountBlock { .. })
    ));
}

#[test]
fn metadata_with_refcount_0_is_refused() {
    for (cluster, what) in [
        (0, "the header"),
        (1, "the refcount table"),
        (3, "the L1 table"),
    ] {
        let mut f = image();
        f[0x20000 + 2 * cluster + 1] = 0;
        assert_eq!(
            run(&f).0,
            Err(HeaderError::Unreferenced {
                what,
                cluster: cluster as u64
            })
        );
    }
    // The refcount block's own count is not looked at.
    let mut f = image();
    f[0x20000 + 2 * 2 + 1] = 0;
    assert_eq!(run(&f).0, Ok(()));
}

#[test]
fn refcount_block_must_be_aligned_and_in_the_file() {
    for offset in [0x20200, 0x40000, 0xffff_ffff_ffff_0000] {
        let mut f = image();
        put64(&mut f, 0x10000, offset);
        assert_eq!(
            run(&f).0,
            Err(HeaderError::RefcountBlockPlace { index: 0, offset })
        );
    }
}

#[test]
fn refcount_table_must_reach_the_metadata() {
    // 512-byte clusters with 64-bit refcounts: a refcount block covers 64 clusters and a
    // one-cluster table 64 blocks, 4096 clusters; an L1 table at cluster 4096 is beyond it.
    let mut f = vec![0u8; 4097 * 512 + 8];
    f[..112].copy_from_slice(&image()[..112]);
    put32(&mut f, 20, 9);
    put64(&mut f, 24, 32 << 10);
    put64(&mut f, 40, 4096 * 512);
    put64(&mut f, 48, 512);
    put32(&mut f, 96, 6);
    put64(&mut f, 512, 1024);
    put64(&mut f, 1024, 1);
    put64(&mut f, 1032, 1);
    assert_eq!(
        run(&f).0,
        Err(HeaderError::RefcountTableShort {
            what: "the L1 table",
            cluster: 4096,
            entries: 64
        })
    );
    // At cluster 4095 it is covered, by a 64th block that does not exist.
    let mut f = f[..4096 * 512 + 8].to_vec();
    put64(&mut f, 40, 4095 * 512);
    assert_eq!(
        run(&f).0,
        Err(HeaderError::NoRefcountBlock {
            what: "the L1 table",
            cluster: 4095,
            index: 63
        })
    );
}

#[test]
fn sub_byte_refcounts_are_read_from_the_low_bits() {
    // refcount_order 0: one bit per cluster, cluster 0 in bit 0 of the first byte.
    let mut f = image();
    put32(&mut f, 96, 0);
    f[0x20000..0x20008].fill(0);
    f[0x20000] = 0b1011;
    assert_eq!(run(&f).0, Ok(()));
    f[0x20000] = 0b0111;
    assert_eq!(
        run(&f).0,
        Err(HeaderError::Unreferenced {
            what: "the L1 table",
            cluster: 3
        })
    );
    // refcount_order 2: four bits each, cluster 1 in the high nibble of byte 0.
    put32(&mut f, 96, 2);
    f[0x20000] = 0x01;
    f[0x20001] = 0x11;
    assert_eq!(
        run(&f).0,
        Err(HeaderError::Unreferenced {
            what: "the refcount table",
            cluster: 1
        })
    );
    f[0x20000] = 0x11;
    assert_eq!(run(&f).0, Ok(()));
}

#[test]
fn wide_refcounts_are_big_endian() {
    let mut f = image();
    put32(&mut f, 96, 6);
    f[0x20000..0x20040].fill(0);
    for c in 0..4 {
        f[0x20000 + 8 * c + 7] = 1;
    }
    assert_eq!(run(&f).0, Ok(()));
    // A count in the top byte only is still not 0.
    f[0x20000 + 8 * 3 + 7] = 0;
    f[0x20000 + 8 * 3] = 1;
    assert_eq!(run(&f).0, Ok(()));
    f[0x20000 + 8 * 3] = 0;
    assert!(matches!(
        run(&f).0,
        Err(HeaderError::Unreferenced { cluster: 3, .. })
    ));
}
