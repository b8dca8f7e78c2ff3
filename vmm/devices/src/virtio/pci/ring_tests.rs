//! Transport tests for the ring features every device gets: VIRTIO_F_RING_EVENT_IDX
//! (`avail_event` published, `used_event` honoured), the NO_INTERRUPT flag without it,
//! notifications suppressed while a queue is served, and the pass limit that hands a busy
//! queue back to the event loop.

use std::sync::Arc;

use virtio_bindings::bindings::virtio_ring::VRING_USED_F_NO_NOTIFY;
use virtio_queue::QueueOwnedT;
use vm_memory::{Bytes, GuestAddress};

use super::tests::{
    device, init_with, queue_read, r32, r8, read_header, read_notified, w32, write_desc, Line,
    AVAIL, DESC, USED,
};
use super::*;
use crate::pci::msix::testing::Recorder as MsiRecorder;
use crate::virtio::block::request::VIRTIO_BLK_S_OK;
use crate::virtio::block::VIRTIO_BLK_F_FLUSH;
use crate::virtio::notify::{QueueEvents, Recorder};
use crate::virtio::{VIRTIO_F_INDIRECT_DESC, VIRTIO_F_RING_EVENT_IDX};

const SIZE: u16 = 16;
/// `used_event`, after the available ring's entries.
const USED_EVENT: u64 = AVAIL + 4 + 2 * SIZE as u64;
/// `avail_event`, after the used ring's entries.
const AVAIL_EVENT: u64 = USED + 4 + 8 * SIZE as u64;

fn u16_at(mem: &GuestMemoryMmap, addr: u64) -> u16 {
    mem.read_obj(GuestAddress(addr)).unwrap()
}

#[test]
fn the_transport_offers_indirect_descriptors_and_event_idx() {
    let (mut d, _, _) = device();
    w32(&mut d, 0x00, 0);
    let low = u64::from(r32(&mut d, 0x04));
    assert_ne!(low & VIRTIO_F_INDIRECT_DESC, 0);
    assert_ne!(low & VIRTIO_F_RING_EVENT_IDX, 0);
}

#[test]
fn with_event_idx_avail_event_follows_and_used_event_decides_interrupts() {
    let (mut d, mem, line) = device();
    mem.write_obj(0xffffu16, GuestAddress(AVAIL_EVENT)).unwrap();
    init_with(
        &mut d,
        SIZE,
        true,
        VIRTIO_BLK_F_FLUSH | VIRTIO_F_RING_EVENT_IDX,
    );
    // used_event 0: the first completion (used index 0 -> 1) interrupts.
    read_notified(&mut d, &mem, 1);
    assert_eq!(u16_at(&mem, USED + 2), 1);
    assert!(line.high());
    assert_eq!(u16_at(&mem, AVAIL_EVENT), 1, "notify me at the next buffer");
    r8(&mut d, 0x1000);
    assert!(!line.high());
    // used_event 2: interrupt once the used index passes 2, so not for 1 -> 2 ...
    mem.write_obj(2u16, GuestAddress(USED_EVENT)).unwrap();
    read_notified(&mut d, &mem, 2);
    assert_eq!(u16_at(&mem, USED + 2), 2);
    assert!(!line.high(), "interrupted before used_event");
    assert_eq!(u16_at(&mem, AVAIL_EVENT), 2);
    // ... but for 2 -> 3.
    read_notified(&mut d, &mem, 3);
    assert!(line.high());
    assert_eq!(d.interrupt_counts().intx, 2);
}

#[test]
fn without_event_idx_the_no_interrupt_flag_silences_completions() {
    let (mut d, mem, line) = device();
    mem.write_obj(0xffffu16, GuestAddress(AVAIL_EVENT)).unwrap();
    init_with(&mut d, SIZE, true, VIRTIO_BLK_F_FLUSH);
    mem.write_obj(1u16, GuestAddress(AVAIL)).unwrap();
    read_notified(&mut d, &mem, 1);
    assert_eq!(u16_at(&mem, USED + 2), 1, "served");
    assert!(!line.high(), "interrupted despite NO_INTERRUPT");
    mem.write_obj(0u16, GuestAddress(AVAIL)).unwrap();
    read_notified(&mut d, &mem, 2);
    assert!(line.high());
    // Neither event field is used without the feature.
    assert_eq!(u16_at(&mem, AVAIL_EVENT), 0xffff);
    assert_eq!(u16_at(&mem, USED), 0, "notifications enabled after serving");
}

#[test]
fn with_event_idx_the_no_interrupt_flag_is_ignored() {
    let (mut d, mem, line) = device();
    init_with(
        &mut d,
        SIZE,
        true,
        VIRTIO_BLK_F_FLUSH | VIRTIO_F_RING_EVENT_IDX,
    );
    mem.write_obj(1u16, GuestAddress(AVAIL)).unwrap();
    read_notified(&mut d, &mem, 1);
    assert!(line.high(), "used_event 0 asks for this interrupt");
}

#[test]
fn a_pass_that_fails_still_interrupts_for_what_it_used() {
    let (mut d, mem, line) = device();
    init_with(&mut d, SIZE, true, VIRTIO_BLK_F_FLUSH);
    // A good read, then a head index beyond the queue.
    queue_read(&mem, 1);
    mem.write_obj(200u16, GuestAddress(AVAIL + 4 + 2)).unwrap();
    mem.write_obj(2u16, GuestAddress(AVAIL + 2)).unwrap();
    d.write_bar(0, NOTIFY_OFFSET, &[0, 0]);
    assert_ne!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
    assert_eq!(u16_at(&mem, USED + 2), 1, "the good read was used");
    assert!(line.high());
    assert_eq!(r8(&mut d, 0x1000), ISR_QUEUE | ISR_CONFIG);
    assert_eq!(u16_at(&mem, USED), 0, "notifications enabled again");
}

#[test]
fn a_chain_may_be_as_long_as_the_largest_queue_whatever_size_the_driver_chose() {
    const TABLE: u64 = 0x6000;
    let (mut d, mem, _) = device();
    init_with(
        &mut d,
        SIZE,
        true,
        VIRTIO_BLK_F_FLUSH | VIRTIO_F_INDIRECT_DESC,
    );
    // Header, 16 x 256 bytes of data, status: 18 descriptors in a 16-entry queue.
    read_header(&mem);
    let mut table = vec![(0x8000u64, 16u32, 1u16)];
    table.extend((0..16).map(|i| (0x9000 + 256 * i, 256, 3)));
    table.push((0xa000, 1, 2));
    for (i, &(addr, len, flags)) in (0u16..).zip(&table) {
        write_desc(&mem, TABLE, u64::from(i), (addr, len, flags, i + 1));
    }
    write_desc(&mem, DESC, 0, (TABLE, 18 * 16, 4, 0));
    mem.write_obj(1u16, GuestAddress(AVAIL + 2)).unwrap();
    d.write_bar(0, NOTIFY_OFFSET, &[0, 0]);
    assert_eq!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
    assert_eq!(
        mem.read_obj::<u8>(GuestAddress(0xa000)).unwrap(),
        VIRTIO_BLK_S_OK
    );
    assert_eq!(d.device().stats().ok, 1);
}

/// A device that, like a driver on another vCPU, makes one more buffer available during
/// each pass until `feed` runs out, and notes the used ring's flags it sees.
struct Feeder {
    feed: u16,
    passes: usize,
    used_flags: Vec<u16>,
}

impl VirtioDevice for Feeder {
    fn device_type(&self) -> u16 {
        0x3f
    }
    fn pci_class(&self) -> u32 {
        0xff_00_00
    }
    fn features(&self) -> u64 {
        0
    }
    fn queue_max_sizes(&self) -> &[u16] {
        &[SIZE]
    }
    fn config_len(&self) -> usize {
        0
    }
    fn read_config(&self, _offset: u64, _data: &mut [u8]) {}
    fn process_queue(
        &mut self,
        _index: usize,
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<bool, ProcessError> {
        self.passes += 1;
        self.used_flags
            .push(mem.read_obj(GuestAddress(queue.used_ring())).unwrap());
        let heads: Vec<u16> = queue.iter(mem)?.map(|c| c.head_index()).collect();
        for &head in &heads {
            queue.add_used(mem, head, 0)?;
        }
        if self.feed > 0 {
            self.feed -= 1;
            make_available(mem);
        }
        Ok(!heads.is_empty())
    }
}

/// Puts descriptor 0 (a 1-byte buffer) in the next entry of the available ring.
fn make_available(mem: &GuestMemoryMmap) {
    let idx = u16_at(mem, AVAIL + 2);
    let entry = AVAIL + 4 + 2 * u64::from(idx % SIZE);
    mem.write_obj(0u16, GuestAddress(entry)).unwrap();
    mem.write_obj(idx.wrapping_add(1), GuestAddress(AVAIL + 2))
        .unwrap();
}

fn feeder(feed: u16, features: u64) -> (VirtioPciDevice<Feeder>, GuestMemoryMmap) {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let device = Feeder {
        feed,
        passes: 0,
        used_flags: Vec::new(),
    };
    let mut d = VirtioPciDevice::new(
        device,
        mem.clone(),
        Box::new(Line::default()),
        Box::new(MsiRecorder::default()),
        10,
    )
    .unwrap();
    write_desc(&mem, DESC, 0, (0x1000, 1, 0, 0));
    init_with(&mut d, SIZE, true, features);
    make_available(&mem);
    (d, mem)
}

#[test]
fn buffers_added_while_serving_are_served_without_a_notification() {
    for features in [0, VIRTIO_F_RING_EVENT_IDX] {
        let (mut d, mem) = feeder(3, features);
        d.write_bar(0, NOTIFY_OFFSET, &[0, 0]);
        assert_eq!(d.device.passes, 4, "features {features:#x}");
        assert_eq!(u16_at(&mem, USED + 2), 4, "all four used");
        if features == 0 {
            // NO_NOTIFY during every pass, cleared afterwards.
            let no_notify = u16::try_from(VRING_USED_F_NO_NOTIFY).unwrap();
            assert_eq!(d.device.used_flags, vec![no_notify; 4]);
            assert_eq!(u16_at(&mem, USED), 0);
        } else {
            // The flag is not used; avail_event asks for the next buffer.
            assert_eq!(d.device.used_flags, vec![0; 4]);
            assert_eq!(u16_at(&mem, AVAIL_EVENT), 4);
        }
        assert_eq!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
    }
}

/// Eventfds for one queue, on a route that takes every registration.
fn queue_events() -> QueueEvents {
    QueueEvents::new(
        Arc::new(Recorder::default()),
        1,
        NOTIFY_OFFSET,
        u64::from(NOTIFY_MULTIPLIER),
    )
    .unwrap()
}

#[test]
fn a_queue_busy_past_the_pass_limit_goes_back_to_the_event_loop() {
    // Served on the vCPU thread (no eventfds): until the driver stops adding.
    let (mut d, mem) = feeder(20, 0);
    d.write_bar(0, NOTIFY_OFFSET, &[0, 0]);
    assert_eq!(d.device.passes, 21);
    assert_eq!(u16_at(&mem, USED + 2), 21);
    // Served by the event loop: MAX_PASSES passes, then the queue's eventfd is signalled so
    // that the loop comes back to it after its other events.
    let (d, mem) = feeder(20, 0);
    let events = queue_events();
    let fds = events.watch_fds().unwrap();
    let mut d = d.with_queue_events(events);
    d.notify_event(0, 1);
    assert_eq!(d.device.passes, MAX_PASSES);
    assert_eq!(fds[0].read().unwrap(), 1, "requeued once");
    assert_eq!(u16_at(&mem, USED + 2), u16::try_from(MAX_PASSES).unwrap());
    for _ in 0..3 {
        d.notify_event(0, fds[0].read().unwrap_or(0));
    }
    assert_eq!(u16_at(&mem, USED + 2), 21, "nothing lost");
    assert_eq!(
        d.notify_counts().by_event,
        1,
        "the device's own signals not counted"
    );
    // An eventfd that cannot take the signal (its counter full): served to the end at once.
    let (d, mem) = feeder(20, 0);
    let events = queue_events();
    events.watch_fds().unwrap()[0].write(u64::MAX - 1).unwrap();
    let mut d = d.with_queue_events(events);
    d.notify_event(0, 1);
    assert_eq!(d.device.passes, 21);
    assert_eq!(u16_at(&mem, USED + 2), 21);
}
