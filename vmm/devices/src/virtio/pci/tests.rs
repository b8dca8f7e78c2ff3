//! Transport tests: a driver's initialisation through BAR 0, notifications and interrupts,
//! and the misprogramming that must end in DEVICE_NEEDS_RESET rather than a VMM failure.

use std::sync::{Arc, Mutex};

use super::*;
use crate::pci::msix::testing::Recorder as MsiRecorder;
use crate::pci::msix::{MsiMessage, CONTROL_ENABLE, CONTROL_FUNCTION_MASK};
use crate::virtio::block::disk::{DiskImage, MemDisk};
use crate::virtio::block::request::{VIRTIO_BLK_S_OK, VIRTIO_BLK_T_IN};
use crate::virtio::block::{BlockDevice, VIRTIO_BLK_F_FLUSH};
use crate::virtio::notify::Recorder;
use crate::virtio::{STATUS_ACKNOWLEDGE, STATUS_DRIVER};
use vm_memory::{Address, Bytes, GuestAddress};

#[derive(Clone, Default)]
pub(super) struct Line(Arc<Mutex<Vec<bool>>>);

impl IrqLine for Line {
    fn set_level(&self, high: bool) {
        self.0.lock().unwrap().push(high);
    }
}

impl Line {
    pub(super) fn high(&self) -> bool {
        self.0.lock().unwrap().last().copied().unwrap_or(false)
    }
}

pub(super) type Dev = VirtioPciDevice<BlockDevice>;

pub(super) fn device() -> (Dev, GuestMemoryMmap, Line) {
    let (dev, mem, line, _) = device_with_msi();
    (dev, mem, line)
}

fn device_with_msi() -> (Dev, GuestMemoryMmap, Line, MsiRecorder) {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let disk = DiskImage::new(Box::new(MemDisk(vec![0xab; 4096])), 4096, false, "id");
    let line = Line::default();
    let msi = MsiRecorder::default();
    let dev = VirtioPciDevice::new(
        BlockDevice::new(disk),
        mem.clone(),
        Box::new(line.clone()),
        Box::new(msi.clone()),
        10,
    )
    .unwrap();
    (dev, mem, line, msi)
}

pub(super) fn w8(d: &mut VirtioPciDevice<impl VirtioDevice>, off: u64, v: u8) {
    d.write_bar(0, off, &[v]);
}
pub(super) fn w16(d: &mut VirtioPciDevice<impl VirtioDevice>, off: u64, v: u16) {
    d.write_bar(0, off, &v.to_le_bytes());
}
pub(super) fn w32(d: &mut VirtioPciDevice<impl VirtioDevice>, off: u64, v: u32) {
    d.write_bar(0, off, &v.to_le_bytes());
}
pub(super) fn r8(d: &mut VirtioPciDevice<impl VirtioDevice>, off: u64) -> u8 {
    let mut b = [0];
    d.read_bar(0, off, &mut b);
    b[0]
}
pub(super) fn r32(d: &mut VirtioPciDevice<impl VirtioDevice>, off: u64) -> u32 {
    let mut b = [0; 4];
    d.read_bar(0, off, &mut b);
    u32::from_le_bytes(b)
}

pub(super) const DESC: u64 = 0x1000;
pub(super) const AVAIL: u64 = 0x2000;
pub(super) const USED: u64 = 0x3000;

/// Negotiates VERSION_1 | FLUSH and sets queue 0 up with `size` entries at DESC/AVAIL/USED.
fn init(d: &mut Dev, size: u16, driver_ok: bool) {
    init_with(d, size, driver_ok, VIRTIO_BLK_F_FLUSH);
}

/// [`init`] negotiating VERSION_1 and `features`.
pub(super) fn init_with(
    d: &mut VirtioPciDevice<impl VirtioDevice>,
    size: u16,
    driver_ok: bool,
    features: u64,
) {
    w8(d, 0x14, 0);
    w8(d, 0x14, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    w32(d, 0x00, 1);
    assert_eq!(r32(d, 0x04) & 1, 1, "VERSION_1 offered");
    w32(d, 0x08, 0);
    w32(d, 0x0c, u32::try_from(features & 0xffff_ffff).unwrap());
    w32(d, 0x08, 1);
    w32(d, 0x0c, 1 | u32::try_from(features >> 32).unwrap());
    w8(
        d,
        0x14,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK,
    );
    assert_ne!(r8(d, 0x14) & STATUS_FEATURES_OK, 0);
    w16(d, 0x16, 0);
    w16(d, 0x18, size);
    w32(d, 0x20, u32::try_from(DESC).unwrap());
    w32(d, 0x24, 0);
    w32(d, 0x28, u32::try_from(AVAIL).unwrap());
    w32(d, 0x30, u32::try_from(USED).unwrap());
    w16(d, 0x1c, 1);
    if driver_ok {
        w8(
            d,
            0x14,
            STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK | STATUS_DRIVER_OK,
        );
    }
}

/// Writes descriptor `i` of the descriptor table at `table`.
pub(super) fn write_desc(
    mem: &GuestMemoryMmap,
    table: u64,
    i: u64,
    (addr, len, flags, next): (u64, u32, u16, u16),
) {
    let at = GuestAddress(table + 16 * i);
    mem.write_obj(addr, at).unwrap();
    mem.write_obj(len, at.unchecked_add(8)).unwrap();
    mem.write_obj(flags, at.unchecked_add(12)).unwrap();
    mem.write_obj(next, at.unchecked_add(14)).unwrap();
}

/// The header of a read of sector 0, at 0x8000.
pub(super) fn read_header(mem: &GuestMemoryMmap) {
    mem.write_obj(VIRTIO_BLK_T_IN, GuestAddress(0x8000))
        .unwrap();
    mem.write_obj(0u64, GuestAddress(0x8008)).unwrap();
}

/// Puts a read of sector 0 (header 0x8000, data 0x9000, status 0xa000) in the queue.
pub(super) fn queue_read(mem: &GuestMemoryMmap, avail_idx: u16) {
    read_header(mem);
    let desc = |i, d| write_desc(mem, DESC, i, d);
    desc(0, (0x8000, 16, 1, 1));
    desc(1, (0x9000, 512, 3, 2));
    desc(2, (0xa000, 1, 2, 0));
    mem.write_obj(
        0u16,
        GuestAddress(AVAIL + 4 + 2 * u64::from(avail_idx - 1) % 16),
    )
    .unwrap();
    mem.write_obj(avail_idx, GuestAddress(AVAIL + 2)).unwrap();
}

#[test]
fn a_driver_reads_a_sector_and_gets_an_interrupt() {
    let (mut d, mem, line) = device();
    init(&mut d, 16, true);
    queue_read(&mem, 1);
    mem.write_obj(0xeeu8, GuestAddress(0xa000)).unwrap();
    w16(&mut d, 0x3000, 0);
    assert_eq!(
        mem.read_obj::<u8>(GuestAddress(0xa000)).unwrap(),
        VIRTIO_BLK_S_OK
    );
    assert_eq!(mem.read_obj::<u8>(GuestAddress(0x9000)).unwrap(), 0xab);
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 1);
    assert_eq!(mem.read_obj::<u32>(GuestAddress(USED + 8)).unwrap(), 513);
    assert!(line.high());
    // Reading the ISR returns the queue bit, clears it and lowers the line.
    assert_eq!(r8(&mut d, 0x1000), ISR_QUEUE);
    assert!(!line.high());
    assert_eq!(r8(&mut d, 0x1000), 0);
    assert_eq!(d.device().stats().ok, 1);
}

#[test]
fn features_beyond_the_offer_or_without_version_1_are_refused() {
    let (mut d, _, _) = device();
    w8(&mut d, 0x14, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    w32(&mut d, 0x08, 0);
    w32(&mut d, 0x0c, 1 << 30);
    w32(&mut d, 0x08, 1);
    w32(&mut d, 0x0c, 1);
    w8(
        &mut d,
        0x14,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK,
    );
    assert_eq!(r8(&mut d, 0x14) & STATUS_FEATURES_OK, 0);
    w8(&mut d, 0x14, 0);
    w8(
        &mut d,
        0x14,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK,
    );
    assert_eq!(r8(&mut d, 0x14) & STATUS_FEATURES_OK, 0, "legacy driver");
}

#[test]
fn queue_size_not_a_power_of_two_needs_reset() {
    let (mut d, _, line) = device();
    init(&mut d, 100, true);
    assert_ne!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
    assert!(line.high());
    assert_eq!(r8(&mut d, 0x1000), ISR_CONFIG);
    // The queue stays disabled; a reset clears everything.
    assert_eq!(r8(&mut d, 0x1c), 0);
    w8(&mut d, 0x14, 0);
    assert_eq!(d.status(), 0);
    init(&mut d, 16, true);
    assert_eq!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
}

#[test]
fn rings_outside_ram_need_reset() {
    let (mut d, _, _) = device();
    w8(&mut d, 0x14, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    w16(&mut d, 0x18, 16);
    w32(&mut d, 0x20, 0xfff0_0000);
    w32(&mut d, 0x28, u32::try_from(AVAIL).unwrap());
    w32(&mut d, 0x30, u32::try_from(USED).unwrap());
    w16(&mut d, 0x1c, 1);
    assert_ne!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
}

#[test]
fn notifying_a_disabled_queue_or_before_driver_ok_is_ignored() {
    let (mut d, mem, _) = device();
    init(&mut d, 16, false);
    queue_read(&mem, 1);
    w16(&mut d, 0x3000, 0);
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 0);
    // A queue that does not exist.
    w16(&mut d, 0x3004, 1);
    w16(&mut d, 0x3ffc, 1);
    assert_eq!(d.ignored_notifies(), 3);
    assert_eq!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
}

#[test]
fn a_bad_chain_sets_needs_reset_and_stops_the_queue() {
    let (mut d, mem, _) = device();
    init(&mut d, 16, true);
    queue_read(&mem, 1);
    // Data buffer outside RAM.
    mem.write_obj(0x4000_0000u64, GuestAddress(DESC + 16))
        .unwrap();
    w16(&mut d, 0x3000, 0);
    assert_ne!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
    // Later notifications are ignored until the driver resets the device.
    w16(&mut d, 0x3000, 0);
    assert_eq!(d.ignored_notifies(), 1);
}

#[test]
fn avail_index_jump_sets_needs_reset() {
    let (mut d, mem, _) = device();
    init(&mut d, 16, true);
    queue_read(&mem, 1);
    mem.write_obj(40u16, GuestAddress(AVAIL + 2)).unwrap();
    w16(&mut d, 0x3000, 0);
    assert_ne!(d.status() & STATUS_DEVICE_NEEDS_RESET, 0);
}

#[test]
fn capabilities_describe_the_bar_layout() {
    let (mut d, _, _) = device();
    let mut found = Vec::new();
    let mut p = [0u8; 1];
    d.read_config(0x34, &mut p);
    let mut at = usize::from(p[0]);
    let mut msix = None;
    while at != 0 {
        let mut cap = [0u8; 16];
        d.read_config(at, &mut cap);
        if cap[0] == 0x11 {
            // MSI-X: table size - 1, then table and PBA offsets with BIR 0.
            let dword = |i: usize| u32::from_le_bytes(cap[i..i + 4].try_into().unwrap());
            msix = Some((u16::from_le_bytes([cap[2], cap[3]]), dword(4), dword(8)));
        } else {
            assert_eq!(cap[0], 0x09);
            let offset = u32::from_le_bytes(cap[8..12].try_into().unwrap());
            found.push((cap[3], cap[4], offset));
        }
        at = usize::from(cap[1]);
    }
    assert_eq!(
        found,
        vec![
            (1, 0, 0),
            (2, 0, 0x3000),
            (3, 0, 0x1000),
            (4, 0, 0x2000),
            (5, 0, 0)
        ]
    );
    assert_eq!(
        msix,
        Some((1, 0x4000, 0x5000)),
        "two vectors: config and queue 0"
    );
    let mut ids = [0u8; 4];
    d.read_config(0, &mut ids);
    assert_eq!(u32::from_le_bytes(ids), 0x1042_1af4);
    d.read_config(0x2c, &mut ids);
    assert_eq!(u32::from_le_bytes(ids), 0x1100_1af4);
}

#[test]
fn pci_cfg_capability_reaches_the_bar() {
    let (mut d, _, _) = device();
    let cap = d.pci_cfg_cap;
    // Read the device config's capacity (8 sectors) through the window.
    d.write_config(cap + PCI_CFG_BAR, &[0]);
    d.write_config(cap + PCI_CFG_OFFSET, &0x2000u32.to_le_bytes());
    d.write_config(cap + PCI_CFG_LENGTH, &4u32.to_le_bytes());
    let mut v = [0u8; 4];
    d.read_config(cap + PCI_CFG_DATA, &mut v);
    assert_eq!(u32::from_le_bytes(v), 8);
    // Write the status through it.
    d.write_config(cap + PCI_CFG_OFFSET, &0x14u32.to_le_bytes());
    d.write_config(cap + PCI_CFG_LENGTH, &1u32.to_le_bytes());
    d.write_config(cap + PCI_CFG_DATA, &[STATUS_ACKNOWLEDGE]);
    assert_eq!(d.status(), STATUS_ACKNOWLEDGE);
    // A bad length or BAR reads the stored bytes and writes nothing.
    d.write_config(cap + PCI_CFG_LENGTH, &3u32.to_le_bytes());
    d.write_config(cap + PCI_CFG_DATA, &[0]);
    assert_eq!(d.status(), STATUS_ACKNOWLEDGE);
}

#[test]
fn intx_disable_keeps_the_line_low() {
    let (mut d, mem, line) = device();
    d.write_config(4, &0x0406u16.to_le_bytes());
    init(&mut d, 16, true);
    queue_read(&mem, 1);
    w16(&mut d, 0x3000, 0);
    assert!(!line.high());
    assert_eq!(r8(&mut d, 0x1000), ISR_QUEUE);
}

/// Enables MSI-X with vector `v` at address 0xFEE0_0000, data 0x40 + `v` (`masked`: entry
/// masked) and maps the configuration to vector 1 and queue 0 to vector 0.
fn msix_setup(d: &mut Dev, msix_cap: usize, masked: bool) {
    for v in 0..2u16 {
        let e = 0x4000 + 16 * u64::from(v);
        w32(d, e, 0xfee0_0000);
        w32(d, e + 4, 0);
        w32(d, e + 8, 0x40 + u32::from(v));
        w32(d, e + 12, u32::from(masked));
    }
    d.write_config(msix_cap + 2, &CONTROL_ENABLE.to_le_bytes());
    w16(d, 0x10, 1);
    w16(d, 0x16, 0);
    w16(d, 0x1a, 0);
}

/// A device a driver has set up with MSI-X (see [`msix_setup`]) and DRIVER_OK; also its
/// memory, INTx line, MSI sink and MSI-X capability offset.
fn msix_device(masked: bool) -> (Dev, GuestMemoryMmap, Line, MsiRecorder, usize) {
    let (mut d, mem, line, msi_rec) = device_with_msi();
    let cap = d.msix.capability();
    init(&mut d, 16, false);
    msix_setup(&mut d, cap, masked);
    w8(&mut d, 0x14, 0x0f);
    (d, mem, line, msi_rec, cap)
}

/// Queues a read as the `avail_idx`-th request and notifies queue 0.
pub(super) fn read_notified(d: &mut Dev, mem: &GuestMemoryMmap, avail_idx: u16) {
    queue_read(mem, avail_idx);
    w16(d, 0x3000, 0);
}

fn msi(data: u32) -> MsiMessage {
    MsiMessage {
        address: 0xfee0_0000,
        data,
    }
}

fn pba(d: &mut Dev) -> u32 {
    r32(d, 0x5000)
}

#[test]
fn with_msix_enabled_a_used_buffer_sends_the_queue_vector_not_intx() {
    let (mut d, mem, line, msi_rec) = device_with_msi();
    let cap = d.msix.capability();
    init(&mut d, 16, false);
    // INTx high before MSI-X is enabled drops when it is.
    d.interrupt(None);
    assert!(line.high());
    assert_eq!(r8(&mut d, 0x1000), ISR_CONFIG);
    d.interrupt(None);
    msix_setup(&mut d, cap, false);
    assert!(!line.high(), "enabling MSI-X turns INTx off");
    w8(&mut d, 0x14, 0x0f);
    read_notified(&mut d, &mem, 1);
    assert_eq!(msi_rec.sent(), vec![msi(0x40)]);
    assert!(!line.high());
    assert_eq!(
        r8(&mut d, 0x1000) & ISR_QUEUE,
        0,
        "no ISR queue bit with MSI-X"
    );
    // A configuration change (here: a bad chain) sends the configuration vector and sets
    // the ISR's configuration bit.
    mem.write_obj(40u16, GuestAddress(AVAIL + 2)).unwrap();
    w16(&mut d, 0x3000, 0);
    assert_eq!(msi_rec.sent(), vec![msi(0x40), msi(0x41)]);
    assert_eq!(r8(&mut d, 0x1000), ISR_CONFIG);
    assert!(!line.high());
    let counts = d.interrupt_counts();
    assert_eq!((counts.intx, counts.msix.sent), (2, 2));
}

#[test]
fn a_masked_vector_is_pending_until_the_driver_unmasks_it() {
    let (mut d, mem, _, msi_rec, cap) = msix_device(true);
    read_notified(&mut d, &mem, 1);
    assert!(msi_rec.sent().is_empty());
    assert_eq!(pba(&mut d), 0b01);
    w32(&mut d, 0x400c, 0);
    assert_eq!(msi_rec.sent(), vec![msi(0x40)]);
    assert_eq!(pba(&mut d), 0);
    // Function mask: held again, sent when the mask is lifted through config space.
    d.write_config(
        cap + 2,
        &(CONTROL_ENABLE | CONTROL_FUNCTION_MASK).to_le_bytes(),
    );
    read_notified(&mut d, &mem, 2);
    assert_eq!(pba(&mut d), 0b01);
    d.write_config(cap + 2, &CONTROL_ENABLE.to_le_bytes());
    assert_eq!(msi_rec.sent(), vec![msi(0x40), msi(0x40)]);
    assert_eq!(d.interrupt_counts().msix.held, 2);
}

#[test]
fn a_reset_forgets_pending_messages_and_vector_mappings() {
    let (mut d, mem, _, msi_rec, _) = msix_device(true);
    read_notified(&mut d, &mem, 1);
    assert_eq!(pba(&mut d), 0b01);
    w8(&mut d, 0x14, 0);
    assert_eq!(
        pba(&mut d),
        0,
        "what the device had to say before the reset is void"
    );
    let mut v = [0u8; 4];
    d.read_bar(0, 0x10, &mut v[..2]);
    d.read_bar(0, 0x1a, &mut v[2..]);
    assert_eq!(v, [0xff; 4], "config and queue vectors back to NO_VECTOR");
    w32(&mut d, 0x400c, 0);
    assert!(msi_rec.sent().is_empty());
    // The table itself is PCI state, not the device's: it survives the reset.
    assert_eq!(r32(&mut d, 0x4008), 0x40);
}

#[test]
fn intx_follows_msix_enable_and_intx_disable_both_ways() {
    let (mut d, mem, line, msi_rec, cap) = msix_device(true);
    // A configuration change while MSI-X is on and its entry masked: the ISR's config bit,
    // no INTx, the message held.
    d.interrupt(None);
    assert!(!line.high());
    assert_eq!(pba(&mut d), 0b10);
    // MSI-X off again: the ISR still holds the bit, so INTx rises.
    d.write_config(cap + 2, &0u16.to_le_bytes());
    assert!(line.high());
    // INTx Disable drops it while set, and it rises again when cleared.
    d.write_config(4, &0x0406u16.to_le_bytes());
    assert!(!line.high());
    d.write_config(4, &0x0006u16.to_le_bytes());
    assert!(line.high());
    assert_eq!(r8(&mut d, 0x1000), ISR_CONFIG);
    assert!(!line.high());
    // Back on INTx, a used buffer sets the queue bit and raises the line.
    queue_read(&mem, 1);
    w16(&mut d, 0x3000, 0);
    assert!(line.high());
    assert_eq!(r8(&mut d, 0x1000), ISR_QUEUE);
    assert!(
        msi_rec.sent().is_empty(),
        "the held config message never went out"
    );
    assert_eq!(d.interrupt_counts().intx, 3);
}

#[test]
fn no_vector_means_no_interrupt_and_an_unmapped_queue_stays_silent() {
    let (mut d, mem, line, msi_rec, _) = msix_device(false);
    // The driver asks for a vector the table lacks: NO_VECTOR, and nothing is sent.
    w16(&mut d, 0x1a, 7);
    let mut v = [0u8; 2];
    d.read_bar(0, 0x1a, &mut v);
    assert_eq!(u16::from_le_bytes(v), NO_VECTOR);
    read_notified(&mut d, &mem, 1);
    assert_eq!(d.device().stats().ok, 1);
    assert!(msi_rec.sent().is_empty());
    assert!(!line.high());
    assert_eq!(pba(&mut d), 0);
}

#[test]
fn the_msix_table_is_reachable_through_the_pci_cfg_window() {
    let (mut d, _, _, _) = device_with_msi();
    let cap = d.pci_cfg_cap;
    d.write_config(cap + PCI_CFG_BAR, &[0]);
    d.write_config(cap + PCI_CFG_OFFSET, &0x4008u32.to_le_bytes());
    d.write_config(cap + PCI_CFG_LENGTH, &4u32.to_le_bytes());
    d.write_config(cap + PCI_CFG_DATA, &0x51u32.to_le_bytes());
    assert_eq!(r32(&mut d, 0x4008), 0x51);
}

fn with_events(d: Dev) -> (Dev, Arc<Recorder>) {
    let route = Arc::new(Recorder::default());
    let events = crate::virtio::notify::QueueEvents::new(
        route.clone(),
        1,
        NOTIFY_OFFSET,
        u64::from(NOTIFY_MULTIPLIER),
    )
    .unwrap();
    (d.with_queue_events(events), route)
}

fn bar0(base: u64) -> BarRegion {
    BarRegion {
        index: VIRTIO_BAR,
        kind: BarKind::Memory64 { prefetchable: true },
        base,
        size: VIRTIO_BAR_SIZE,
    }
}

#[test]
fn queue_eventfds_follow_bar_0_and_count_what_they_serve() {
    let (d, mem, line) = device();
    let (mut d, route) = with_events(d);
    d.bar_mapped(&BarRegion {
        index: 2,
        ..bar0(0xd000_0000)
    });
    assert!(
        route.attached.lock().unwrap().is_empty(),
        "another BAR moves nothing"
    );
    d.bar_mapped(&bar0(0xc000_0000));
    assert_eq!(*route.attached.lock().unwrap(), vec![0xc000_3000]);
    init(&mut d, 16, true);
    queue_read(&mem, 1);
    // What the event loop does when KVM signalled the eventfd twice.
    d.notify_event(0, 2);
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 1);
    assert!(line.high());
    assert_eq!(
        d.notify_counts(),
        NotifyCounts {
            by_event: 2,
            by_exit: 0
        }
    );
    d.bar_unmapped(&bar0(0xc000_0000));
    assert!(route.attached.lock().unwrap().is_empty());
}

/// A ready device whose eventfds are attached at 0xc000_0000, with a read made available
/// and not yet served (its notification sits in the eventfd).
fn ready_with_a_read_queued() -> (Dev, GuestMemoryMmap, Arc<Recorder>) {
    let (d, mem, _) = device();
    let (mut d, route) = with_events(d);
    d.bar_mapped(&bar0(0xc000_0000));
    init(&mut d, 16, true);
    queue_read(&mem, 1);
    (d, mem, route)
}

#[test]
fn requests_an_eventfd_swallowed_are_served_at_the_end_or_on_fallback() {
    // The event loop ended before reading the eventfd: the VM's end serves the queue.
    let (mut d, mem, _) = ready_with_a_read_queued();
    d.serve_pending();
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 1);
    assert_eq!(d.device().stats().ok, 1);
    d.serve_pending();
    assert_eq!(
        d.device().stats().ok,
        1,
        "nothing new, nothing served twice"
    );
    // The event loop cannot watch the eventfds: they come off KVM and the queue is served.
    let (mut d, mem, route) = ready_with_a_read_queued();
    d.stop_queue_events();
    assert!(route.attached.lock().unwrap().is_empty());
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 1);
    // From now on the BAR's notify register is served on the writing thread.
    d.bar_mapped(&bar0(0xc000_0000));
    assert!(route.attached.lock().unwrap().is_empty());
    queue_read(&mem, 2);
    w16(&mut d, 0x3000, 0);
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 2);
    assert_eq!(d.notify_counts().by_exit, 1);
}

#[test]
fn without_eventfds_nothing_is_pending() {
    let (mut d, mem, _) = device();
    init(&mut d, 16, true);
    queue_read(&mem, 1);
    d.serve_pending();
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 0);
}
