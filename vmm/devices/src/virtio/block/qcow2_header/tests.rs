use super::*;

/// The file length of the image [`header`] describes: what `qemu-img create -f qcow2 IMG
/// 64M` writes (the header cluster, the refcount table at 0x10000, a refcount block at
/// 0x20000 and the 8-byte L1 table at 0x30000, the file's last bytes).
const LEN: u64 = 0x30008;

/// A version 3 header as qemu-img 10 writes it for a 64 MiB image with 64 KiB clusters.
fn header() -> Vec<u8> {
    let mut h = vec![0u8; HEADER_BYTES];
    h[..4].copy_from_slice(&QCOW2_MAGIC);
    put32(&mut h, 4, 3);
    put32(&mut h, 20, 16);
    put64(&mut h, 24, 64 << 20);
    put32(&mut h, 36, 1);
    put64(&mut h, 40, 0x30000);
    put64(&mut h, 48, 0x10000);
    put32(&mut h, 56, 1);
    put32(&mut h, 96, 4);
    put32(&mut h, 100, 112);
    h
}

fn put32(h: &mut [u8], at: usize, v: u32) {
    h[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(h: &mut [u8], at: usize, v: u64) {
    h[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// [`header`] with `edit` applied, checked against a file of [`LEN`] bytes.
fn with(edit: impl FnOnce(&mut Vec<u8>)) -> Result<(), HeaderError> {
    let mut h = header();
    edit(&mut h);
    check(&h, LEN)
}

#[test]
fn qemu_img_header_passes() {
    assert_eq!(check(&header(), LEN), Ok(()));
}

#[test]
fn version_2_header_passes_without_the_v3_fields() {
    let mut h = header();
    put32(&mut h, 4, 2);
    // Version 2 has no header_length, refcount_order or features: whatever is there is
    // the first header extension's bytes, not fields.
    put32(&mut h, 100, 0);
    put64(&mut h, 72, u64::MAX);
    assert_eq!(check(&h[..72], LEN), Ok(()));
    assert_eq!(check(&h, LEN), Ok(()));
}

#[test]
fn truncated_header_is_refused() {
    let h = header();
    assert_eq!(
        check(&h[..71], 71),
        Err(HeaderError::Truncated { len: 71, need: 72 })
    );
    assert_eq!(
        check(&h[..103], 103),
        Err(HeaderError::Truncated {
            len: 103,
            need: 104
        })
    );
    // The bytes are there but the file is shorter than header_length says.
    assert_eq!(
        check(&h, 108),
        Err(HeaderError::Truncated {
            len: 108,
            need: 112
        })
    );
}

#[test]
fn magic_and_version_are_checked() {
    assert!(matches!(with(|h| h[3] = 0xfa), Err(HeaderError::Magic(_))));
    for v in [0, 1, 4, u32::MAX] {
        assert_eq!(with(|h| put32(h, 4, v)), Err(HeaderError::Version(v)));
    }
}

#[test]
fn cluster_bits_edges() {
    for bits in [0, 8, 22, 63, 64, u32::MAX] {
        assert_eq!(
            with(|h| put32(h, 20, bits)),
            Err(HeaderError::ClusterBits(bits))
        );
    }
    assert_eq!(
        HeaderError::ClusterBits(8).to_string(),
        "qcow2 cluster_bits 8 outside 9..=21"
    );
    // 2 MiB clusters: the tables at 0x10000 and 0x30000 are no longer cluster-aligned.
    assert!(matches!(
        with(|h| put32(h, 20, 21)),
        Err(HeaderError::Unaligned {
            field: "l1_table_offset",
            ..
        })
    ));
}

/// The crafted image: cluster_bits 9 in a 64 MiB image whose L1 table has one
/// entry. With 512-byte clusters an entry maps 32 KiB, so 64 MiB needs 2048 (QEMU: "L1
/// table is too small").
#[test]
fn cluster_bits_9_needs_a_larger_l1_table() {
    assert_eq!(
        with(|h| put32(h, 20, 9)),
        Err(HeaderError::L1TooSmall {
            l1_size: 1,
            size: 64 << 20,
            cluster_bits: 9,
            need: 2048
        })
    );
    assert_eq!(
        with(|h| put32(h, 20, 9)).unwrap_err().to_string(),
        "qcow2 l1_size 1 too small: a size of 67108864 bytes with cluster_bits 9 needs 2048 L1 entries"
    );
    // The same with a disk that one entry maps, and a refcount table of one 512-byte cluster.
    assert_eq!(
        with(|h| {
            put32(h, 20, 9);
            put64(h, 24, 32 << 10);
        }),
        Ok(())
    );
}

#[test]
fn header_length_edges() {
    for len in [0, 72, 103] {
        assert_eq!(
            with(|h| put32(h, 100, len)),
            Err(HeaderError::HeaderLength {
                len,
                cluster: 0x10000
            })
        );
    }
    assert_eq!(with(|h| put32(h, 100, 104)), Ok(()));
    assert_eq!(
        with(|h| put32(h, 100, 0x10001)),
        Err(HeaderError::HeaderLength {
            len: 0x10001,
            cluster: 0x10000
        })
    );
    // The largest header_length fits the cluster but not this file.
    assert_eq!(
        with(|h| put32(h, 100, 0x10000)),
        Ok(()),
        "0x10000 <= file length 0x30008"
    );
    let mut h = header();
    put32(&mut h, 100, 0x10000);
    assert_eq!(
        check(&h, 0x8000),
        Err(HeaderError::Truncated {
            len: 0x8000,
            need: 0x10000
        })
    );
}

#[test]
fn refcount_order_edges() {
    assert_eq!(with(|h| put32(h, 96, 0)), Ok(()));
    assert_eq!(with(|h| put32(h, 96, 6)), Ok(()));
    assert_eq!(
        with(|h| put32(h, 96, 7)),
        Err(HeaderError::RefcountOrder(7))
    );
}

#[test]
fn crypt_method_edges() {
    // 1 and 2 pass here: the caller refuses encrypted images with its own message.
    assert_eq!(with(|h| put32(h, 32, 2)), Ok(()));
    assert_eq!(with(|h| put32(h, 32, 3)), Err(HeaderError::CryptMethod(3)));
}

#[test]
fn incompatible_features_but_the_data_file_bit_are_refused() {
    assert_eq!(with(|h| put64(h, 72, 1 << 2)), Ok(()));
    let e = with(|h| put64(h, 72, 1 | 1 << 2 | 1 << 40)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "qcow2 incompatible_features 0x10000000001: bit 0 (dirty), bit 40 (unknown) not supported"
    );
    for bit in [1, 3, 4, 5, 63] {
        assert!(matches!(
            with(|h| put64(h, 72, 1 << bit)),
            Err(HeaderError::Incompatible { bits, .. }) if bits == 1 << bit
        ));
    }
    // Compatible and autoclear bits are not checked.
    assert_eq!(
        with(|h| {
            put64(h, 80, u64::MAX);
            put64(h, 88, u64::MAX);
        }),
        Ok(())
    );
}

#[test]
fn compression_type_needs_its_feature_bit() {
    assert_eq!(with(|h| h[104] = 1), Err(HeaderError::CompressionType(1)));
    // With a 104-byte header there is no compression type field.
    assert_eq!(
        with(|h| {
            put32(h, 100, 104);
            h[104] = 1;
        }),
        Ok(())
    );
}

/// The 2^64 - 1 bytes; QEMU's limit is what an L1 table of 4 Mi entries maps.
#[test]
fn virtual_size_edges() {
    let max = 1u64 << 51; // 4 Mi entries x 8 Ki L2 entries x 64 KiB
    assert_eq!(
        with(|h| put64(h, 24, u64::MAX)),
        Err(HeaderError::Size {
            size: u64::MAX,
            max,
            cluster: 0x10000
        })
    );
    assert_eq!(
        with(|h| put64(h, 24, max + 1)),
        Err(HeaderError::Size {
            size: max + 1,
            max,
            cluster: 0x10000
        })
    );
    // The largest size QEMU allows needs the largest L1 table; this one has one entry.
    assert_eq!(
        with(|h| put64(h, 24, max)),
        Err(HeaderError::L1TooSmall {
            l1_size: 1,
            size: max,
            cluster_bits: 16,
            need: MAX_L1_ENTRIES
        })
    );
    // One entry maps 512 MiB of a 64 KiB-cluster image.
    assert_eq!(with(|h| put64(h, 24, 512 << 20)), Ok(()));
    assert_eq!(
        with(|h| put64(h, 24, (512 << 20) + 1)),
        Err(HeaderError::L1TooSmall {
            l1_size: 1,
            size: (512 << 20) + 1,
            cluster_bits: 16,
            need: 2
        })
    );
    assert_eq!(with(|h| put64(h, 24, 0)), Ok(()));
    // 2 MiB clusters reach 2^61 bytes.
    let mut h = header();
    put32(&mut h, 20, 21);
    put64(&mut h, 24, 1 << 61);
    put32(&mut h, 36, 1 << 22);
    put64(&mut h, 40, 0x40_0000);
    put64(&mut h, 48, 0x20_0000);
    assert_eq!(check(&h, 0x240_0000), Ok(()));
    put64(&mut h, 24, (1 << 61) + 1);
    assert!(matches!(
        check(&h, 0x240_0000),
        Err(HeaderError::Size { max, .. }) if max == 1 << 61
    ));
}

#[test]
fn l1_size_limit() {
    let too_many = u32::try_from(MAX_L1_ENTRIES + 1).unwrap();
    assert_eq!(
        with(|h| put32(h, 36, too_many)),
        Err(HeaderError::L1TooLarge(too_many))
    );
}

#[test]
fn l1_table_must_be_aligned_and_inside_the_file() {
    assert!(matches!(
        with(|h| put64(h, 40, 0x30008)),
        Err(HeaderError::Unaligned {
            field: "l1_table_offset",
            offset: 0x30008,
            ..
        })
    ));
    // The case: moved past the end.
    let e = with(|h| put64(h, 40, 0x100000)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "qcow2 l1_table_offset 0x100000: the L1 table (bytes 0x100000..0x100008) lies past the end of the file (0x30008 bytes)"
    );
    // Starting exactly at the end.
    let mut h = header();
    assert!(matches!(
        check(&h, 0x30000),
        Err(HeaderError::PastEnd {
            field: "l1_table_offset",
            ..
        })
    ));
    // Ending inside the file's last (partial) cluster passes, a cluster beyond does not.
    put32(&mut h, 36, 0x2000);
    assert_eq!(check(&h, 0x30001), Ok(()));
    put32(&mut h, 36, 0x2001);
    assert!(matches!(
        check(&h, 0x30001),
        Err(HeaderError::PastEnd { .. })
    ));
    // An offset so large the table's end overflows.
    assert!(matches!(
        with(|h| {
            put32(h, 36, 0x2000);
            put64(h, 40, u64::MAX - 0xffff);
        }),
        Err(HeaderError::PastEnd { end: u64::MAX, .. })
    ));
}

/// The third image: the first 512 bytes of a good one.
#[test]
fn image_truncated_to_512_bytes_is_refused() {
    let h = header();
    assert!(matches!(
        check(&h, 512),
        Err(HeaderError::PastEnd {
            field: "l1_table_offset",
            ..
        })
    ));
}

#[test]
fn refcount_table_edges() {
    assert_eq!(with(|h| put32(h, 56, 0)), Err(HeaderError::NoRefcountTable));
    assert_eq!(
        with(|h| put32(h, 56, 129)),
        Err(HeaderError::RefcountTableTooLarge {
            clusters: 129,
            max: 128
        })
    );
    assert!(matches!(
        with(|h| put64(h, 48, 0x10200)),
        Err(HeaderError::Unaligned {
            field: "refcount_table_offset",
            ..
        })
    ));
    // Four clusters from 0x10000 end at 0x50000, more than a cluster past 0x30008; three
    // end inside the file's last cluster.
    assert_eq!(with(|h| put32(h, 56, 3)), Ok(()));
    assert!(matches!(
        with(|h| put32(h, 56, 4)),
        Err(HeaderError::PastEnd {
            field: "refcount_table_offset",
            ..
        })
    ));
    assert_eq!(with(|h| put32(h, 56, 2)), Ok(()));
}

#[test]
fn snapshot_table_edges() {
    assert_eq!(
        with(|h| put32(h, 60, 65537)),
        Err(HeaderError::Snapshots(65537))
    );
    assert!(matches!(
        with(|h| put64(h, 64, 8)),
        Err(HeaderError::Unaligned {
            field: "snapshots_offset",
            ..
        })
    ));
    assert!(matches!(
        with(|h| {
            put32(h, 60, 1);
            put64(h, 64, 0x40000);
        }),
        Err(HeaderError::PastEnd {
            field: "snapshots_offset",
            ..
        })
    ));
    assert_eq!(
        with(|h| {
            put32(h, 60, 1);
            put64(h, 64, 0x20000);
        }),
        Ok(())
    );
}

#[test]
fn backing_file_name_edges() {
    let name = |offset: u64, size: u32| {
        with(|h| {
            put64(h, 8, offset);
            put32(h, 16, size);
        })
    };
    assert_eq!(name(0x200, 1023), Ok(()));
    assert_eq!(name(0x200, 1024), Err(HeaderError::BackingNameLength(1024)));
    assert_eq!(name(0x10000 - 10, 10), Ok(()));
    assert_eq!(
        name(0x10000 - 9, 10),
        Err(HeaderError::BackingNamePlace {
            offset: 0x10000 - 9,
            size: 10,
            cluster: 0x10000
        })
    );
    assert!(matches!(
        name(u64::MAX, 10),
        Err(HeaderError::BackingNamePlace { .. })
    ));
    // A file that ends inside the name (its tables moved to where this check passes them:
    // no L1 table, the refcount table over the header).
    let mut h = header();
    put64(&mut h, 8, 0x200);
    put32(&mut h, 16, 16);
    put64(&mut h, 24, 0);
    put32(&mut h, 36, 0);
    put64(&mut h, 48, 0);
    assert!(matches!(
        check(&h, 0x208),
        Err(HeaderError::PastEnd {
            field: "backing_file_offset",
            ..
        })
    ));
}

#[test]
fn any_prefix_of_any_header_is_checked_without_panicking() {
    let h = header();
    for cut in 0..=h.len() {
        let _ = check(&h[..cut], LEN);
        let _ = check(&h[..cut], 0);
        let _ = check(&h[..cut], u64::MAX);
    }
    let _ = check(&[0xff; HEADER_BYTES], u64::MAX);
}
