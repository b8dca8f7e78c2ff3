//! Block device tests with hand-built queues in a `GuestMemoryMmap`: the requests a driver
//! sends, and the misprogrammed ones a hostile guest sends.

use super::disk::MemDisk;
use super::request::*;
use super::*;
use crate::virtio::queue::ChainError;
use virtio_bindings::bindings::virtio_ring::{
    VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::desc::RawDescriptor;
use virtio_queue::mock::MockSplitQueue;
use vm_memory::GuestAddress;

const SECTORS: u64 = 8;
pub(super) const HDR: u64 = 0x8000;
pub(super) const DATA: u64 = 0x9000;
pub(super) const STATUS: u64 = 0xa000;
pub(super) const R: u32 = VRING_DESC_F_NEXT;
pub(super) const W: u32 = VRING_DESC_F_NEXT | VRING_DESC_F_WRITE;
pub(super) const W_END: u32 = VRING_DESC_F_WRITE;

pub(super) fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap()
}

pub(super) fn image(len: usize, readonly: bool) -> DiskImage {
    let bytes: Vec<u8> = (0..len)
        .map(|i| u8::try_from(i / 512 + 1).unwrap())
        .collect();
    DiskImage::new(
        Box::new(MemDisk(bytes)),
        len as u64,
        readonly,
        "test-disk-id",
    )
}

pub(super) fn raw(addr: u64, len: u32, flags: u32) -> RawDescriptor {
    RawDescriptor::from(Descriptor::new(addr, len, u16::try_from(flags).unwrap(), 0))
}

/// Links `descs` in order (0 -> 1 -> ...), as a driver does.
pub(super) fn chain(descs: &[RawDescriptor]) -> Vec<RawDescriptor> {
    descs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let d = Descriptor::from(*d);
            RawDescriptor::from(Descriptor::new(
                d.addr().0,
                d.len(),
                d.flags(),
                u16::try_from(i + 1).unwrap(),
            ))
        })
        .collect()
}

pub(super) fn header(m: &GuestMemoryMmap, kind: u32, sector: u64) {
    m.write_obj(kind, GuestAddress(HDR)).unwrap();
    m.write_obj(0u32, GuestAddress(HDR + 4)).unwrap();
    m.write_obj(sector, GuestAddress(HDR + 8)).unwrap();
}

pub(super) struct Outcome {
    pub(super) result: Result<bool, ProcessError>,
    pub(super) status: u8,
    pub(super) used_len: u32,
    pub(super) dev: BlockDevice,
}

pub(super) fn run(m: &GuestMemoryMmap, disk: DiskImage, descs: &[RawDescriptor]) -> Outcome {
    m.write_obj(0xeeu8, GuestAddress(STATUS)).unwrap();
    let vq = MockSplitQueue::new(m, 16);
    let mut q: Queue = vq.create_queue().unwrap();
    vq.add_desc_chains(descs, 0).unwrap();
    let mut dev = BlockDevice::new(disk);
    let result = dev.process_queue(0, &mut q, m);
    let used = vq.used().ring().ref_at(0).unwrap().load();
    Outcome {
        result,
        status: m.read_obj(GuestAddress(STATUS)).unwrap(),
        used_len: used.len(),
        dev,
    }
}

fn read_request(m: &GuestMemoryMmap, disk: DiskImage, sector: u64, len: u32) -> Outcome {
    header(m, VIRTIO_BLK_T_IN, sector);
    run(
        m,
        disk,
        &chain(&[raw(HDR, 16, R), raw(DATA, len, W), raw(STATUS, 1, W_END)]),
    )
}

#[test]
fn read_sector_fills_the_buffer() {
    let m = mem();
    let o = read_request(&m, image(512 * 8, false), 2, 1024);
    assert!(o.result.unwrap());
    assert_eq!(o.status, VIRTIO_BLK_S_OK);
    assert_eq!(o.used_len, 1025);
    let mut buf = [0u8; 1024];
    m.read_slice(&mut buf, GuestAddress(DATA)).unwrap();
    assert!(buf[..512].iter().all(|b| *b == 3));
    assert!(buf[512..].iter().all(|b| *b == 4));
}

#[test]
fn a_read_through_an_indirect_table_fills_the_buffer() {
    const TABLE: u64 = 0xb000;
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 5);
    let table = chain(&[raw(HDR, 16, R), raw(DATA, 512, W), raw(STATUS, 1, W_END)]);
    for (i, d) in table.iter().enumerate() {
        m.write_obj(*d, GuestAddress(TABLE + 16 * i as u64))
            .unwrap();
    }
    let indirect = raw(TABLE, 48, VRING_DESC_F_INDIRECT);
    let o = run(&m, image(512 * 8, false), &[indirect]);
    assert!(o.result.unwrap());
    assert_eq!(o.status, VIRTIO_BLK_S_OK);
    assert_eq!(o.used_len, 513);
    let mut buf = [0u8; 512];
    m.read_slice(&mut buf, GuestAddress(DATA)).unwrap();
    assert!(buf.iter().all(|b| *b == 6), "sector 5 holds 6s");
}

#[test]
fn write_sector_reaches_the_disk_and_read_only_refuses_it() {
    for readonly in [false, true] {
        let m = mem();
        header(&m, VIRTIO_BLK_T_OUT, 1);
        m.write_slice(&[0x5a; 512], GuestAddress(DATA)).unwrap();
        let mut o = run(
            &m,
            image(512 * 8, readonly),
            &chain(&[raw(HDR, 16, R), raw(DATA, 512, R), raw(STATUS, 1, W_END)]),
        );
        o.result.unwrap();
        assert_eq!(o.used_len, 1);
        let mut back = [0u8; 512];
        o.dev.disk.backend.read_at(512, &mut back).unwrap();
        if readonly {
            assert_eq!(o.status, VIRTIO_BLK_S_IOERR);
            assert!(back.iter().all(|b| *b == 2), "read-only disk changed");
            assert_ne!(o.dev.features() & VIRTIO_BLK_F_RO, 0);
        } else {
            assert_eq!(o.status, VIRTIO_BLK_S_OK);
            assert!(back.iter().all(|b| *b == 0x5a));
            assert_eq!(o.dev.features() & VIRTIO_BLK_F_RO, 0);
        }
    }
}

#[test]
fn flush_get_id_and_unsupported() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_FLUSH, 0);
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(STATUS, 1, W_END)]),
    );
    assert_eq!((o.status, o.used_len), (VIRTIO_BLK_S_OK, 1));

    header(&m, VIRTIO_BLK_T_GET_ID, 0);
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(DATA, 20, W), raw(STATUS, 1, W_END)]),
    );
    assert_eq!((o.status, o.used_len), (VIRTIO_BLK_S_OK, 21));
    let mut id = [0u8; 20];
    m.read_slice(&mut id, GuestAddress(DATA)).unwrap();
    assert_eq!(&id[..12], b"test-disk-id");
    assert_eq!(&id[12..], &[0; 8]);

    header(&m, 99, 0);
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(STATUS, 1, W_END)]),
    );
    assert_eq!(o.status, VIRTIO_BLK_S_UNSUPP);
    assert_eq!(o.dev.stats().unsupported, 1);
}

#[test]
fn header_and_data_may_be_split_anywhere() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    // Header in two pieces (10 + 6 bytes), data in three, status sharing the last buffer.
    let o = run(
        &m,
        image(4096, false),
        &chain(&[
            raw(HDR, 10, R),
            raw(HDR + 10, 6, R),
            raw(DATA, 100, W),
            raw(DATA + 0x100, 400, W),
            raw(DATA + 0x300, 13, W_END),
        ]),
    );
    o.result.unwrap();
    assert_eq!(o.used_len, 513);
    // The status byte is the last byte of the last buffer.
    assert_eq!(
        m.read_obj::<u8>(GuestAddress(DATA + 0x300 + 12)).unwrap(),
        0
    );
    assert_eq!(
        m.read_obj::<u8>(GuestAddress(DATA + 0x300 + 11)).unwrap(),
        1
    );
}

#[test]
fn reads_beyond_the_image_and_overflowing_sectors_fail() {
    let m = mem();
    for (sector, len) in [
        (SECTORS, 512),
        (SECTORS - 1, 1024),
        (u64::MAX, 512),
        (u64::MAX / 512, 512),
    ] {
        let o = read_request(&m, image(512 * 8, false), sector, len);
        assert_eq!(o.status, VIRTIO_BLK_S_IOERR, "sector {sector} len {len}");
        assert_eq!(o.used_len, 1);
    }
    let o = read_request(&m, image(512 * 8, false), SECTORS - 1, 512);
    assert_eq!(o.status, VIRTIO_BLK_S_OK);
}

#[test]
fn odd_sized_image_tail_is_unreachable() {
    let m = mem();
    // 3 sectors and 100 bytes: capacity 3.
    let disk = image(512 * 3 + 100, false);
    assert_eq!(disk.sectors, 3);
    let dev = BlockDevice::new(disk);
    let mut cap = [0u8; 8];
    dev.read_config(0, &mut cap);
    assert_eq!(u64::from_le_bytes(cap), 3);
    let o = read_request(&m, image(512 * 3 + 100, false), 3, 512);
    assert_eq!(o.status, VIRTIO_BLK_S_IOERR);
    let o = read_request(&m, image(512 * 3 + 100, false), 2, 512);
    assert_eq!(o.status, VIRTIO_BLK_S_OK);
}

#[test]
fn zero_length_unaligned_and_wrong_direction_data_fail() {
    let m = mem();
    for len in [0, 100, 513] {
        let o = read_request(&m, image(4096, false), 0, len);
        assert_eq!(o.status, VIRTIO_BLK_S_IOERR, "len {len}");
    }
    // A read whose data buffer is device-readable: nothing to read into.
    header(&m, VIRTIO_BLK_T_IN, 0);
    m.write_slice(&[0x77; 512], GuestAddress(DATA)).unwrap();
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(DATA, 512, R), raw(STATUS, 1, W_END)]),
    );
    assert_eq!(o.status, VIRTIO_BLK_S_IOERR);
    // A write whose data buffer is device-writable: no data to write, and the disk is intact.
    header(&m, VIRTIO_BLK_T_OUT, 0);
    let mut o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(DATA, 512, W), raw(STATUS, 1, W_END)]),
    );
    assert_eq!(o.status, VIRTIO_BLK_S_IOERR);
    let mut back = [0u8; 512];
    o.dev.disk.backend.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|b| *b == 1));
}

#[test]
fn short_header_fails() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 8, R), raw(DATA, 512, W), raw(STATUS, 1, W_END)]),
    );
    assert_eq!(o.status, VIRTIO_BLK_S_IOERR);
}

#[test]
fn chain_without_status_byte_needs_reset() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(DATA, 512, 0)]),
    );
    assert!(matches!(o.result, Err(ProcessError::NoStatus)));
    // A zero-length status descriptor is no status either.
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(STATUS, 0, W_END)]),
    );
    assert!(matches!(o.result, Err(ProcessError::NoStatus)));
    assert_eq!(o.status, 0xee, "nothing written");
}

#[test]
fn buffers_outside_ram_need_reset_and_touch_nothing() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    for data in [0xf_ff00, 0x10_0000, u64::MAX - 0x100] {
        let o = run(
            &m,
            image(4096, false),
            &chain(&[raw(HDR, 16, R), raw(data, 512, W), raw(STATUS, 1, W_END)]),
        );
        assert!(
            matches!(
                o.result,
                Err(ProcessError::Chain(ChainError::OutsideRam(..)))
            ),
            "{data:#x}"
        );
        assert_eq!(o.status, 0xee);
    }
    // A status byte outside RAM.
    let o = run(
        &m,
        image(4096, false),
        &chain(&[raw(HDR, 16, R), raw(0x20_0000, 1, W_END)]),
    );
    assert!(matches!(o.result, Err(ProcessError::Chain(_))));
}

#[test]
fn looping_and_overlong_chains_need_reset() {
    let m = mem();
    header(&m, VIRTIO_BLK_T_IN, 0);
    // 0 -> 1 -> 0: the walk stops after the queue size and the chain is refused.
    let looping = [
        RawDescriptor::from(Descriptor::new(HDR, 16, u16::try_from(R).unwrap(), 1)),
        RawDescriptor::from(Descriptor::new(DATA, 512, u16::try_from(W).unwrap(), 0)),
    ];
    let vq = MockSplitQueue::new(&m, 16);
    let mut q: Queue = vq.create_queue().unwrap();
    vq.desc_table().store(0, looping[0]).unwrap();
    vq.desc_table().store(1, looping[1]).unwrap();
    vq.avail().ring().ref_at(0).unwrap().store(0);
    vq.avail().idx().store(1);
    let mut dev = BlockDevice::new(image(4096, false));
    assert!(matches!(
        dev.process_queue(0, &mut q, &m),
        Err(ProcessError::Chain(ChainError::Unterminated))
    ));
    // More descriptors than the queue holds: 17 linked ones in a 16-entry table.
    let mut descs = vec![raw(HDR, 16, R)];
    descs.extend((0..15).map(|i| raw(DATA + i * 0x200, 512, W)));
    descs.push(raw(STATUS, 1, W_END));
    let vq = MockSplitQueue::new(&m, 16);
    let mut q: Queue = vq.create_queue().unwrap();
    for (i, d) in chain(&descs).iter().enumerate().take(16) {
        vq.desc_table()
            .store(u16::try_from(i).unwrap(), *d)
            .unwrap();
    }
    vq.avail().ring().ref_at(0).unwrap().store(0);
    vq.avail().idx().store(1);
    let mut dev = BlockDevice::new(image(4096, false));
    assert!(dev.process_queue(0, &mut q, &m).is_err());
}

#[test]
fn avail_index_running_ahead_needs_reset() {
    let m = mem();
    let vq = MockSplitQueue::new(&m, 16);
    let mut q: Queue = vq.create_queue().unwrap();
    vq.avail().idx().store(100);
    let mut dev = BlockDevice::new(image(4096, false));
    assert!(matches!(
        dev.process_queue(0, &mut q, &m),
        Err(ProcessError::Queue(_))
    ));
}

#[test]
fn head_index_beyond_the_queue_needs_reset() {
    let m = mem();
    let vq = MockSplitQueue::new(&m, 16);
    let mut q: Queue = vq.create_queue().unwrap();
    vq.avail().ring().ref_at(0).unwrap().store(200);
    vq.avail().idx().store(1);
    let mut dev = BlockDevice::new(image(4096, false));
    assert!(dev.process_queue(0, &mut q, &m).is_err());
}

#[test]
fn config_space_reports_discard_and_write_zeroes_limits() {
    let dev = BlockDevice::new(image(512 * 8, false));
    assert_ne!(dev.features() & VIRTIO_BLK_F_DISCARD, 0);
    assert_ne!(dev.features() & VIRTIO_BLK_F_WRITE_ZEROES, 0);
    let mut c = [0xeeu8; CONFIG_LEN];
    dev.read_config(0, &mut c);
    let u32_at = |at: usize| u32::from_le_bytes(c[at..at + 4].try_into().unwrap());
    assert_eq!(u32_at(36), 1 << 22, "max_discard_sectors");
    assert_eq!(u32_at(40), 32, "max_discard_seg");
    assert_eq!(u32_at(44), 8, "discard_sector_alignment");
    assert_eq!(u32_at(48), 1 << 22, "max_write_zeroes_sectors");
    assert_eq!(u32_at(52), 32, "max_write_zeroes_seg");
    assert_eq!(&c[56..], &[1, 0, 0, 0], "write_zeroes_may_unmap");
    // A read-only disk offers neither.
    let ro = BlockDevice::new(image(512 * 8, true));
    assert_eq!(
        ro.features() & (VIRTIO_BLK_F_DISCARD | VIRTIO_BLK_F_WRITE_ZEROES),
        0
    );
}

#[test]
fn config_space_reports_capacity_seg_max_and_block_size() {
    let dev = BlockDevice::new(image(512 * 8, false));
    let mut c = [0u8; 32];
    dev.read_config(0, &mut c);
    assert_eq!(u64::from_le_bytes(c[..8].try_into().unwrap()), 8);
    assert_eq!(u32::from_le_bytes(c[12..16].try_into().unwrap()), 254);
    assert_eq!(u32::from_le_bytes(c[20..24].try_into().unwrap()), 512);
    assert_eq!(&c[24..], &[0; 8], "no topology, writeback or num_queues");
    let mut b = [0xffu8; 2];
    dev.read_config(u64::MAX, &mut b);
    assert_eq!(b, [0, 0]);
}
