//! DISCARD and WRITE_ZEROES through the queue: what reaches the disk, and the ranges that
//! must change nothing.

use super::discard::{FLAG_UNMAP, MAX_RANGES, MAX_RANGE_SECTORS};
use super::request::*;
use super::tests::{chain, header, image, mem, raw, run, Outcome, DATA, HDR, R, STATUS, W_END};
use super::*;
use vm_memory::GuestAddress;

const SECTORS: u64 = 8;

/// A request of `kind` whose data is `ranges` (sector, count, flags), on an 8-sector disk
/// whose sector n holds bytes n + 1.
fn ranged(kind: u32, ranges: &[(u64, u32, u32)], readonly: bool) -> Outcome {
    let m = mem();
    header(&m, kind, 0);
    let mut data = Vec::new();
    for &(sector, count, flags) in ranges {
        data.extend_from_slice(&sector.to_le_bytes());
        data.extend_from_slice(&count.to_le_bytes());
        data.extend_from_slice(&flags.to_le_bytes());
    }
    m.write_slice(&data, GuestAddress(DATA)).unwrap();
    let len = u32::try_from(data.len()).unwrap();
    run(
        &m,
        image(512 * 8, readonly),
        &chain(&[raw(HDR, 16, R), raw(DATA, len, R), raw(STATUS, 1, W_END)]),
    )
}

/// The first byte of each sector of the disk after the request.
fn sectors(o: &mut Outcome) -> Vec<u8> {
    (0..SECTORS)
        .map(|s| {
            let mut b = [0u8; 512];
            o.dev.disk.backend.read_at(s * 512, &mut b).unwrap();
            assert!(b.iter().all(|x| *x == b[0]), "sector {s} torn");
            b[0]
        })
        .collect()
}

const UNTOUCHED: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

#[test]
fn write_zeroes_zeroes_every_range_and_nothing_else() {
    for flags in [0, FLAG_UNMAP] {
        let mut o = ranged(
            VIRTIO_BLK_T_WRITE_ZEROES,
            &[(1, 2, flags), (6, 1, 0)],
            false,
        );
        assert!(o.result.as_ref().unwrap());
        assert_eq!(o.status, VIRTIO_BLK_S_OK, "flags {flags}");
        assert_eq!(o.used_len, 1, "only the status byte");
        assert_eq!(sectors(&mut o), [1, 0, 0, 4, 5, 6, 0, 8]);
        assert_eq!(o.dev.stats().ok, 1);
    }
}

#[test]
fn discard_is_accepted_and_may_keep_the_data() {
    // The in-memory disk frees nothing; a file punches holes (disk.rs tests).
    let mut o = ranged(VIRTIO_BLK_T_DISCARD, &[(0, 8, 0)], false);
    assert_eq!(o.status, VIRTIO_BLK_S_OK);
    assert_eq!(sectors(&mut o), UNTOUCHED);
}

#[test]
fn unknown_flags_and_unmap_on_discard_are_unsupported() {
    let cases = [
        (VIRTIO_BLK_T_WRITE_ZEROES, 2),
        (VIRTIO_BLK_T_WRITE_ZEROES, 0x8000_0001),
        (VIRTIO_BLK_T_DISCARD, FLAG_UNMAP),
    ];
    for (kind, flags) in cases {
        // The first range is fine; the request is refused as a whole.
        let mut o = ranged(kind, &[(0, 1, 0), (2, 1, flags)], false);
        assert_eq!(
            o.status, VIRTIO_BLK_S_UNSUPP,
            "type {kind} flags {flags:#x}"
        );
        assert_eq!(o.dev.stats().unsupported, 1);
        assert_eq!(sectors(&mut o), UNTOUCHED);
    }
}

#[test]
fn bad_ranges_fail_and_change_nothing() {
    let too_many: Vec<(u64, u32, u32)> = (0..=MAX_RANGES).map(|_| (0, 1, 0)).collect();
    let cases: [&[(u64, u32, u32)]; 5] = [
        &[(0, 1, 0), (7, 2, 0)],
        &[(0, 1, 0), (u64::MAX, 1, 0)],
        &[(0, MAX_RANGE_SECTORS + 1, 0)],
        &too_many,
        &[],
    ];
    for ranges in cases {
        let mut o = ranged(VIRTIO_BLK_T_WRITE_ZEROES, ranges, false);
        assert_eq!(o.status, VIRTIO_BLK_S_IOERR, "{ranges:?}");
        assert_eq!(sectors(&mut o), UNTOUCHED, "{ranges:?}");
    }
    // A read-only disk refuses both.
    for kind in [VIRTIO_BLK_T_WRITE_ZEROES, VIRTIO_BLK_T_DISCARD] {
        let mut o = ranged(kind, &[(0, 1, 0)], true);
        assert_eq!(o.status, VIRTIO_BLK_S_IOERR);
        assert_eq!(sectors(&mut o), UNTOUCHED);
    }
}

#[test]
fn a_partial_range_fails() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_WRITE_ZEROES, 0);
    m.write_obj(1u64, GuestAddress(DATA)).unwrap();
    m.write_obj(1u32, GuestAddress(DATA + 8)).unwrap();
    let mut o = run(
        &m,
        image(512 * 8, false),
        &chain(&[raw(HDR, 16, R), raw(DATA, 12, R), raw(STATUS, 1, W_END)]),
    );
    assert_eq!(o.status, VIRTIO_BLK_S_IOERR);
    assert_eq!(sectors(&mut o), UNTOUCHED);
}
