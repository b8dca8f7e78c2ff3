//! The virtio-blk request path on a queue the fuzz input programs: queue size and ring
//! addresses from the first bytes, guest RAM (descriptor table, indirect tables, rings,
//! headers, buffers) from the rest. Activation, serving passes, chain collection, request
//! parsing and execution must never panic, and the disk must never be touched outside its
//! capacity ([`CheckedDisk`] panics if it is).
#![no_main]

use devices::virtio::block::disk::{DiskImage, SECTOR_SIZE};
use devices::virtio::block::BlockDevice;
use devices::virtio::pci::serve_pass;
use devices::virtio::queue::QueueRegs;
use hvprof_fuzz::CheckedDisk;
use libfuzzer_sys::fuzz_target;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const RAM: usize = 0x10000;
/// 16 sectors and an odd tail of 100 bytes that must stay unreachable.
const IMAGE: u64 = 16 * SECTOR_SIZE + 100;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let word = |i: usize| u64::from(u16::from_le_bytes([data[i], data[i + 1]]));
    let readonly = data[0] & 0x80 != 0;
    let regs = QueueRegs {
        size: 1 << (data[0] & 0x7),
        desc: word(2) & !0xf,
        avail: word(4) & !0x1,
        used: word(6) & !0x3,
        ..QueueRegs::new(256)
    };
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), RAM)]).unwrap();
    let ram = &data[8..];
    mem.write_slice(&ram[..ram.len().min(RAM)], GuestAddress(0))
        .unwrap();
    let Ok(mut queue) = regs.activate(&mem, data[0] & 0x40 != 0) else {
        return;
    };
    let disk = CheckedDisk::new(usize::try_from(IMAGE).unwrap());
    let image = DiskImage::new(Box::new(disk), IMAGE, readonly, "fuzz");
    let mut dev = BlockDevice::new(image);
    // Two passes as the transport makes them (notifications suppressed, then enabled and
    // the ring looked at again; the event fields with bit 6 of the first byte); the second
    // starts where the first left off.
    for _ in 0..2 {
        if serve_pass(&mut dev, 0, &mut queue, &mem).error.is_some() {
            break;
        }
    }
    let s = dev.stats();
    assert!(s.ok + s.errors + s.unsupported <= 2 * u64::from(regs.size));
});
