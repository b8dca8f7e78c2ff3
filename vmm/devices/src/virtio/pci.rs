//! The modern virtio-pci transport (virtio 1.2, 4.1): one 64-bit memory BAR holding the
//! common configuration, ISR, device configuration and notification regions, each
//! described by a vendor capability, plus the PCI configuration access capability
//! (VIRTIO_PCI_CAP_PCI_CFG) that firmware uses when the BAR is out of its reach, and MSI-X.
//!
//! ```text
//! BAR 0 (32 KiB, 64-bit, prefetchable)
//! 0x0000  common configuration (0x38 bytes)
//! 0x1000  ISR status (1 byte, read to clear)
//! 0x2000  device configuration
//! 0x3000  notifications: queue i at 0x3000 + 4 * i
//! 0x4000  MSI-X table: vector 0 for configuration changes, 1 + i for queue i (suggested;
//!         the driver maps vectors as it likes through config/queue_msix_vector)
//! 0x5000  MSI-X pending bits
//! ```
//!
//! Interrupts: INTx (the ISR and a level-triggered line) until the driver enables MSI-X,
//! then one message per vector the driver mapped (virtio 1.2, 4.1.4.5 and 4.1.5.1.2).

use std::sync::atomic::Ordering;

use virtio_bindings::bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::common::{CommonConfig, CommonEvent, COMMON_CONFIG_LEN};
use super::notify::{QueueEvents, QueueNotify};
use super::{
    IrqLine, ProcessError, VirtioDevice, ISR_CONFIG, ISR_QUEUE, NO_VECTOR,
    STATUS_DEVICE_NEEDS_RESET, STATUS_DRIVER_OK, STATUS_FEATURES_OK, TRANSPORT_FEATURES,
    VIRTIO_F_RING_EVENT_IDX, VIRTIO_F_VERSION_1, VIRTIO_PCI_DEVICE_ID_BASE, VIRTIO_PCI_VENDOR_ID,
};
use crate::pci::config::{
    BarKind, BarRegion, ConfigSpace, ConfigSpaceError, PciIds, COMMAND_INTX_DISABLE,
};
use crate::pci::msix::{MsiSink, Msix, MsixLayout, MsixStats};
use crate::pci::PciDevice;

/// The BAR holding every virtio region.
pub const VIRTIO_BAR: u8 = 0;
/// Its size.
pub const VIRTIO_BAR_SIZE: u64 = 0x8000;
const COMMON_OFFSET: u64 = 0x0000;
const ISR_OFFSET: u64 = 0x1000;
const DEVICE_OFFSET: u64 = 0x2000;
/// Offset of the notification region in the BAR.
pub const NOTIFY_OFFSET: u64 = 0x3000;
const MSIX_TABLE_OFFSET: u64 = 0x4000;
const MSIX_PBA_OFFSET: u64 = 0x5000;
const REGION_LEN: u64 = 0x1000;
/// queue_notify_off is the queue index; notifications are this many bytes apart.
pub const NOTIFY_MULTIPLIER: u32 = 4;

const CAP_VENDOR: u8 = 0x09;
const CAP_COMMON: u8 = 1;
const CAP_NOTIFY: u8 = 2;
const CAP_ISR: u8 = 3;
const CAP_DEVICE: u8 = 4;
const CAP_PCI_CFG: u8 = 5;
const PCI_CFG_BAR: usize = 4;
const PCI_CFG_OFFSET: usize = 8;
const PCI_CFG_LENGTH: usize = 12;
const PCI_CFG_DATA: usize = 16;

/// Passes over a queue that one notification may make while the driver keeps adding
/// buffers; then, where the queue has an eventfd the event loop watches, the rest waits for
/// the loop's next turn, so that one busy queue cannot hold the loop (or a vCPU thread).
const MAX_PASSES: usize = 8;

fn virtio_cap(cfg_type: u8, offset: u64, length: u64, extra: &[u8]) -> Vec<u8> {
    let len = u8::try_from(16 + extra.len()).unwrap_or(16);
    let mut cap = vec![CAP_VENDOR, 0, len, cfg_type, VIRTIO_BAR, 0, 0, 0];
    cap.extend_from_slice(&u32::try_from(offset).unwrap_or(0).to_le_bytes());
    cap.extend_from_slice(&u32::try_from(length).unwrap_or(0).to_le_bytes());
    cap.extend_from_slice(extra);
    cap
}

/// A virtio device on the PCI transport.
pub struct VirtioPciDevice<D: VirtioDevice> {
    config: ConfigSpace,
    device: D,
    mem: GuestMemoryMmap,
    irq: Box<dyn IrqLine>,
    msix: Msix,
    /// The INTx line is high.
    intx_high: bool,
    /// Times the INTx line was raised.
    intx_raised: u64,
    common: CommonConfig,
    queues: Vec<Option<Queue>>,
    isr: u8,
    pci_cfg_cap: usize,
    ignored_notifies: u64,
    queue_events: Option<QueueEvents>,
    /// Queue `i`'s eventfd holds a signal of the device's own (see `requeue`).
    requeued: Vec<bool>,
    notifies: NotifyCounts,
}

/// Interrupts the device sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterruptCounts {
    /// Times the INTx line was raised.
    pub intx: u64,
    /// MSI-X messages.
    pub msix: MsixStats,
}

/// How the driver's notifications arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotifyCounts {
    /// Through a queue's ioeventfd, served by the event loop (KVM counts each write; writes
    /// close together are served in one pass).
    pub by_event: u64,
    /// As an MMIO exit (or through the PCI configuration window), served on the vCPU thread.
    pub by_exit: u64,
}

impl<D: VirtioDevice> VirtioPciDevice<D> {
    /// Wraps `device`, whose INTx (pin A) is `irq`, reported to the guest as `line`, and whose
    /// MSI-X messages (one vector for configuration changes plus one per queue) go to `msi`.
    pub fn new(
        device: D,
        mem: GuestMemoryMmap,
        irq: Box<dyn IrqLine>,
        msi: Box<dyn MsiSink>,
        line: u8,
    ) -> Result<Self, ConfigSpaceError> {
        let mut config = ConfigSpace::new(PciIds {
            vendor: VIRTIO_PCI_VENDOR_ID,
            device: VIRTIO_PCI_DEVICE_ID_BASE + device.device_type(),
            revision: 1,
            class: device.pci_class(),
            subsystem_vendor: VIRTIO_PCI_VENDOR_ID,
            subsystem: 0x1100,
        });
        config.add_bar(
            usize::from(VIRTIO_BAR),
            BarKind::Memory64 { prefetchable: true },
            VIRTIO_BAR_SIZE,
        )?;
        config.set_interrupt(1, line);
        let queues = device.queue_max_sizes().len();
        let config_len = u64::try_from(device.config_len()).unwrap_or(0);
        config.add_capability(&virtio_cap(
            CAP_COMMON,
            COMMON_OFFSET,
            COMMON_CONFIG_LEN as u64,
            &[],
        ))?;
        config.add_capability(&virtio_cap(
            CAP_NOTIFY,
            NOTIFY_OFFSET,
            u64::from(NOTIFY_MULTIPLIER) * queues as u64,
            &NOTIFY_MULTIPLIER.to_le_bytes(),
        ))?;
        config.add_capability(&virtio_cap(CAP_ISR, ISR_OFFSET, 1, &[]))?;
        config.add_capability(&virtio_cap(CAP_DEVICE, DEVICE_OFFSET, config_len, &[]))?;
        let pci_cfg_cap = config.add_capability(&virtio_cap(CAP_PCI_CFG, 0, 0, &[0; 4]))?;
        config.set_writable(pci_cfg_cap + PCI_CFG_BAR, 1);
        config.set_writable(pci_cfg_cap + PCI_CFG_OFFSET, 12);
        let vectors = u16::try_from(queues + 1).unwrap_or(u16::MAX);
        let layout = MsixLayout {
            vectors,
            bar: VIRTIO_BAR,
            table: u32::try_from(MSIX_TABLE_OFFSET).unwrap_or(0),
            pba: u32::try_from(MSIX_PBA_OFFSET).unwrap_or(0),
        };
        let msix = Msix::add(&mut config, layout, msi)?;
        let common = CommonConfig::new(
            device.features() | TRANSPORT_FEATURES,
            device.queue_max_sizes(),
            msix.vectors(),
        );
        Ok(VirtioPciDevice {
            config,
            device,
            mem,
            irq,
            msix,
            intx_high: false,
            intx_raised: 0,
            common,
            queues: (0..queues).map(|_| None).collect(),
            isr: 0,
            pci_cfg_cap,
            ignored_notifies: 0,
            queue_events: None,
            requeued: vec![false; queues],
            notifies: NotifyCounts::default(),
        })
    }

    /// Routes the queues' notifications to `events` whenever the BAR is mapped.
    pub fn with_queue_events(mut self, events: QueueEvents) -> Self {
        self.queue_events = Some(events);
        self
    }

    /// The interrupts sent so far.
    pub fn interrupt_counts(&self) -> InterruptCounts {
        InterruptCounts {
            intx: self.intx_raised,
            msix: self.msix.stats(),
        }
    }

    /// How many notifications arrived, and how.
    pub fn notify_counts(&self) -> NotifyCounts {
        self.notifies
    }

    /// Serves every enabled queue of a ready device as if notified (until empty): for
    /// notifications an eventfd took that nobody will read (the event loop has ended or
    /// cannot watch it).
    pub fn serve_pending(&mut self) {
        if self.queue_events.is_some() || self.notifies.by_event != 0 {
            self.serve_all();
        }
        // Otherwise every notification was served as it came.
    }

    fn serve_all(&mut self) {
        if !self.driver_ok() {
            return;
        }
        for i in 0..self.queues.len() {
            if self.queues[i].is_some() {
                self.notify(i);
            }
        }
    }

    /// Queue `index` is enabled and may be served.
    fn queue_ready(&self, index: usize) -> bool {
        self.driver_ok() && matches!(self.queues.get(index), Some(Some(_)))
    }

    /// The driver is ready and the device does not need a reset: queues may be served.
    fn driver_ok(&self) -> bool {
        self.common.status & (STATUS_DRIVER_OK | STATUS_DEVICE_NEEDS_RESET) == STATUS_DRIVER_OK
    }

    /// Moves the queue eventfds (if any) with BAR `region` to `base` (`None`: unmapped).
    fn move_queue_events(&mut self, region: &BarRegion, base: Option<u64>) {
        if let Some(events) = self.queue_events.as_mut() {
            if region.index == VIRTIO_BAR {
                events.move_to(base);
            }
        }
    }

    /// The device behind the transport.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device behind the transport, to act on outside a request (the end of a run).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The device status.
    pub fn status(&self) -> u8 {
        self.common.status
    }

    /// Notifications ignored because the device or the queue was not ready.
    pub fn ignored_notifies(&self) -> u64 {
        self.ignored_notifies
    }

    /// Notifies the driver of used buffers in queue `index` (`Some`) or of a configuration
    /// change (`None`): by the vector it mapped if MSI-X is enabled (none if it mapped
    /// NO_VECTOR), else through the ISR and the INTx line. The configuration bit of the ISR is
    /// set either way (virtio 1.2, 4.1.4.5.1).
    fn interrupt(&mut self, queue: Option<usize>) {
        let (bit, vector) = match queue {
            Some(i) => (
                ISR_QUEUE,
                self.common.queues.get(i).map_or(NO_VECTOR, |q| q.vector),
            ),
            None => (ISR_CONFIG, self.common.config_vector),
        };
        if self.msix.enabled(&self.config) {
            self.isr |= bit & ISR_CONFIG;
            if vector != NO_VECTOR {
                self.msix.trigger(&self.config, vector);
            }
            return;
        }
        self.isr |= bit;
        self.sync_intx();
    }

    /// Drives INTx to what the state asks: high while the ISR holds a bit, unless MSI-X is
    /// enabled or the command register disables INTx. Counts each raise.
    fn sync_intx(&mut self) {
        let high = self.isr != 0
            && !self.msix.enabled(&self.config)
            && self.config.command() & COMMAND_INTX_DISABLE == 0;
        if high && !self.intx_high {
            self.intx_raised += 1;
        }
        if high != self.intx_high {
            self.irq.set_level(high);
            self.intx_high = high;
        }
    }

    /// After a configuration write: INTx follows MSI-X's enable bit and the command
    /// register's INTx Disable, and an unmasked function sends what was pending.
    fn config_written(&mut self) {
        self.sync_intx();
        self.msix.config_written(&self.config);
    }

    fn needs_reset(&mut self, why: &dyn std::fmt::Display) {
        if self.common.status & STATUS_DEVICE_NEEDS_RESET == 0 {
            log::warn!(
                "virtio device type {}: needs reset: {why}",
                self.device.device_type()
            );
        }
        self.common.status |= STATUS_DEVICE_NEEDS_RESET;
        self.interrupt(None);
    }

    fn reset(&mut self) {
        self.device.reset();
        self.common.reset();
        self.queues.iter_mut().for_each(|q| *q = None);
        self.isr = 0;
        self.sync_intx();
        self.msix.clear_pending();
    }

    fn set_status(&mut self, mut v: u8) {
        if v == 0 {
            self.reset();
            return;
        }
        let old = self.common.status;
        if v & STATUS_FEATURES_OK != 0 && old & STATUS_FEATURES_OK == 0 {
            let wanted = self.common.driver_features;
            if wanted & !self.common.device_features != 0 || wanted & VIRTIO_F_VERSION_1 == 0 {
                log::info!("virtio: driver features {wanted:#x} refused");
                v &= !STATUS_FEATURES_OK;
            } else {
                self.device.ack_features(wanted);
                // Queues a driver enabled before FEATURES_OK (out of order) follow too.
                for q in self.queues.iter_mut().flatten() {
                    q.set_event_idx(wanted & VIRTIO_F_RING_EVENT_IDX != 0);
                }
            }
        }
        self.common.status = v | (old & STATUS_DEVICE_NEEDS_RESET);
    }

    /// VIRTIO_F_RING_EVENT_IDX was negotiated (the driver's features were accepted).
    fn event_idx(&self) -> bool {
        self.common.status & STATUS_FEATURES_OK != 0
            && self.common.driver_features & VIRTIO_F_RING_EVENT_IDX != 0
    }

    fn enable_queue(&mut self, index: usize) {
        let Some(regs) = self.common.queues.get(index).copied() else {
            return;
        };
        match regs.activate(&self.mem, self.event_idx()) {
            Ok(q) => {
                self.queues[index] = Some(q);
                self.common.queues[index].enabled = true;
            }
            Err(e) => self.needs_reset(&format_args!("queue {index}: {e}")),
        }
    }

    /// The driver notified queue `index`: serve it now, on the caller's thread, until it is
    /// empty (at most [`MAX_PASSES`] passes when the event loop can take over the rest).
    pub fn notify(&mut self, index: usize) {
        if !self.queue_ready(index) {
            if self.ignored_notifies == 0 {
                log::info!("virtio: notification of queue {index} that is not ready, ignored");
            }
            self.ignored_notifies += 1;
            return;
        }
        for pass in 1.. {
            let Some(Some(queue)) = self.queues.get_mut(index) else {
                return;
            };
            let done = serve_pass(&mut self.device, index, queue, &self.mem);
            // Buffers used before an error still get their interrupt.
            if done.interrupt {
                self.interrupt(Some(index));
            }
            if let Some(e) = done.error {
                self.needs_reset(&format_args!("queue {index}: {e}"));
                return;
            }
            if !done.more {
                return;
            }
            if pass >= MAX_PASSES && self.requeue(index) {
                return;
            }
        }
    }

    /// Leaves the rest of queue `index` to the event loop's next turn: signals its eventfd
    /// (noted, so that the signal is not counted as the driver's). False if it cannot.
    fn requeue(&mut self, index: usize) -> bool {
        let sent = self.queue_events.as_ref().is_some_and(|q| q.requeue(index));
        if sent {
            if let Some(r) = self.requeued.get_mut(index) {
                *r = true;
            }
        }
        sent
    }

    fn pci_cfg_window(&self) -> Option<(u64, usize)> {
        let c = &self.config;
        let cap = self.pci_cfg_cap;
        let mut bar = [0u8];
        c.read(cap + PCI_CFG_BAR, &mut bar);
        let len = usize::try_from(c.u32_at(cap + PCI_CFG_LENGTH)).ok()?;
        (bar[0] == VIRTIO_BAR && matches!(len, 1 | 2 | 4))
            .then(|| (u64::from(c.u32_at(cap + PCI_CFG_OFFSET)), len))
    }
}

/// What one pass over a queue did.
pub struct Pass {
    /// Buffers were used and the driver wants to hear of it.
    pub interrupt: bool,
    /// The driver added buffers during the pass.
    pub more: bool,
    /// The queue is unusable (the device then needs a reset); buffers used before the error
    /// are in the used ring, and notifications are enabled again.
    pub error: Option<ProcessError>,
}

/// Serves what `queue` holds with the driver's notifications suppressed, then enables them
/// again and looks for buffers added meanwhile (which the driver did not notify). Public for
/// the fuzz targets.
pub fn serve_pass<D: VirtioDevice>(
    device: &mut D,
    index: usize,
    queue: &mut Queue,
    mem: &GuestMemoryMmap,
) -> Pass {
    let before = queue.next_used();
    let served = queue
        .disable_notification(mem)
        .map_err(ProcessError::from)
        .and_then(|()| device.process_queue(index, queue, mem));
    let used = queue.next_used() != before;
    let wants = if used {
        wants_interrupt(queue, mem)
    } else {
        Ok(false)
    };
    let more = queue.enable_notification(mem).map_err(ProcessError::from);
    let interrupt = used && *wants.as_ref().unwrap_or(&true);
    match (served, wants, more) {
        (Ok(_), Ok(_), Ok(more)) => Pass {
            interrupt,
            more,
            error: None,
        },
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Pass {
            interrupt,
            more: false,
            error: Some(e),
        },
    }
}

/// Whether the driver wants an interrupt for the buffers used since the last call: as its
/// `used_event` says with VIRTIO_F_RING_EVENT_IDX, else unless it set NO_INTERRUPT in the
/// available ring's flags (virtio 1.2, 2.7.7.2: the device should not interrupt then).
fn wants_interrupt(queue: &mut Queue, mem: &GuestMemoryMmap) -> Result<bool, ProcessError> {
    let needed = queue.needs_notification(mem)?;
    if queue.event_idx_enabled() || !needed {
        return Ok(needed);
    }
    // The flags are the available ring's first field, in RAM (checked at activation).
    let flags: u16 = mem
        .load(GuestAddress(queue.avail_ring()), Ordering::Acquire)
        .map_err(virtio_queue::Error::GuestMemory)?;
    Ok(u32::from(u16::from_le(flags)) & VRING_AVAIL_F_NO_INTERRUPT == 0)
}

impl<D: VirtioDevice> PciDevice for VirtioPciDevice<D> {
    fn config_space(&self) -> &ConfigSpace {
        &self.config
    }

    fn config_space_mut(&mut self) -> &mut ConfigSpace {
        &mut self.config
    }

    fn read_config(&mut self, offset: usize, data: &mut [u8]) {
        if offset == self.pci_cfg_cap + PCI_CFG_DATA {
            if let Some((bar_offset, len)) = self.pci_cfg_window() {
                let mut buf = [0u8; 4];
                self.read_bar(VIRTIO_BAR, bar_offset, &mut buf[..len]);
                let n = data.len().min(4);
                data[..n].copy_from_slice(&buf[..n]);
                return;
            }
        }
        self.config.read(offset, data);
    }

    fn write_config(&mut self, offset: usize, data: &[u8]) {
        if offset == self.pci_cfg_cap + PCI_CFG_DATA {
            if let Some((bar_offset, len)) = self.pci_cfg_window() {
                let n = data.len().min(len);
                self.write_bar(VIRTIO_BAR, bar_offset, &data[..n]);
            }
            return;
        }
        self.config.write(offset, data);
        self.config_written();
    }

    fn read_bar(&mut self, bar: u8, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if bar != VIRTIO_BAR {
            return;
        }
        match offset / REGION_LEN {
            0 => self.common.read(offset - COMMON_OFFSET, data),
            1 if offset == ISR_OFFSET => {
                data[0] = self.isr;
                self.isr = 0;
                self.sync_intx();
            }
            2 => self.device.read_config(offset - DEVICE_OFFSET, data),
            4 => self.msix.read_table(offset - MSIX_TABLE_OFFSET, data),
            5 => self.msix.read_pba(offset - MSIX_PBA_OFFSET, data),
            _ => {}
        }
    }

    fn write_bar(&mut self, bar: u8, offset: u64, data: &[u8]) {
        if bar != VIRTIO_BAR {
            return;
        }
        match offset / REGION_LEN {
            0 => {
                for event in self.common.write(offset - COMMON_OFFSET, data) {
                    match event {
                        CommonEvent::Status(v) => self.set_status(v),
                        CommonEvent::EnableQueue(i) => self.enable_queue(i),
                    }
                }
            }
            2 => self.device.write_config(offset - DEVICE_OFFSET, data),
            3 => {
                let index = (offset - NOTIFY_OFFSET) / u64::from(NOTIFY_MULTIPLIER);
                self.notifies.by_exit += 1;
                self.notify(usize::try_from(index).unwrap_or(usize::MAX));
            }
            4 => self
                .msix
                .write_table(&self.config, offset - MSIX_TABLE_OFFSET, data),
            _ => {}
        }
    }

    fn bar_mapped(&mut self, region: &BarRegion) {
        self.move_queue_events(region, Some(region.base));
    }

    fn bar_unmapped(&mut self, region: &BarRegion) {
        self.move_queue_events(region, None);
    }
}

impl<D: VirtioDevice> QueueNotify for VirtioPciDevice<D> {
    fn notify_event(&mut self, index: usize, count: u64) {
        // A signal the device left itself is not the driver's.
        let own = self.requeued.get_mut(index).is_some_and(std::mem::take);
        let drivers = count.saturating_sub(u64::from(own));
        self.notifies.by_event += drivers;
        if drivers == 0 && own && !self.queue_ready(index) {
            return; // left for a queue a reset has since disabled
        }
        self.notify(index);
    }

    fn stop_queue_events(&mut self) {
        if let Some(mut events) = self.queue_events.take() {
            events.move_to(None);
            self.serve_all();
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod ring_tests;
