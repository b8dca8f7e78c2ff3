//! Parser tests on descriptor lists (no queue).

use super::*;
use virtio_bindings::bindings::virtio_ring::VRING_DESC_F_WRITE;

fn d(addr: u64, len: u32, write: bool) -> Descriptor {
    let flags = if write {
        u16::try_from(VRING_DESC_F_WRITE).unwrap()
    } else {
        0
    };
    Descriptor::new(addr, len, flags, 0)
}

fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap()
}

#[test]
fn status_is_the_last_writable_byte() {
    assert_eq!(
        status_address(&[d(0, 16, false), d(0x100, 4, true)]),
        Some(GuestAddress(0x103))
    );
    assert_eq!(status_address(&[d(0, 16, false)]), None);
    assert_eq!(status_address(&[d(0, 16, false), d(0x100, 0, true)]), None);
    assert_eq!(status_address(&[]), None);
}

#[test]
fn out_data_follows_the_header_in_the_same_buffer() {
    let m = mem();
    m.write_obj(VIRTIO_BLK_T_OUT, GuestAddress(0x1000)).unwrap();
    m.write_obj(7u64, GuestAddress(0x1008)).unwrap();
    let descs = [d(0x1000, 16 + 512, false), d(0x2000, 1, true)];
    let r = parse(&descs, &m, GuestAddress(0x2000)).unwrap();
    assert_eq!(r.kind, RequestKind::Out);
    assert_eq!(r.sector, 7);
    assert_eq!(
        r.data,
        vec![Segment {
            addr: GuestAddress(0x1010),
            len: 512
        }]
    );
}

#[test]
fn in_data_excludes_the_status_byte() {
    let m = mem();
    m.write_obj(VIRTIO_BLK_T_IN, GuestAddress(0x1000)).unwrap();
    let descs = [
        d(0x1000, 16, false),
        d(0x2000, 512, true),
        d(0x3000, 1, true),
    ];
    let r = parse(&descs, &m, GuestAddress(0x3000)).unwrap();
    assert_eq!(r.data_len(), 512);
    let descs = [d(0x1000, 16, false), d(0x2000, 513, true)];
    let r = parse(&descs, &m, GuestAddress(0x2200)).unwrap();
    assert_eq!(
        r.data,
        vec![Segment {
            addr: GuestAddress(0x2000),
            len: 512
        }]
    );
}

#[test]
fn unknown_types_parse_as_unsupported() {
    let m = mem();
    m.write_obj(12u32, GuestAddress(0x1000)).unwrap();
    let descs = [d(0x1000, 16, false), d(0x2000, 1, true)];
    let r = parse(&descs, &m, GuestAddress(0x2000)).unwrap();
    assert_eq!(r.kind, RequestKind::Unsupported(12));
    assert!(r.data.is_empty());
}

#[test]
fn header_shorter_than_16_bytes_is_refused() {
    let m = mem();
    let descs = [d(0x1000, 15, false), d(0x2000, 1, true)];
    assert_eq!(
        parse(&descs, &m, GuestAddress(0x2000)),
        Err(RequestError::ShortHeader)
    );
}
