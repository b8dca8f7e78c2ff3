//! Virtio 1.x devices over the modern PCI transport.
//!
//! | file | role |
//! | --- | --- |
//! | `pci.rs` | the virtio-pci transport: capabilities, common configuration, ISR, notifications |
//! | `common.rs` | the common configuration registers (features, status, queue setup) |
//! | `queue.rs` | queue registers, checked activation, descriptor-chain collection |
//! | `notify.rs` | queue notifications through ioeventfds, served by the event loop |
//! | `block/` | the block device: `disk.rs` (raw images), `request.rs` (parser), `mod.rs` |
//!
//! Notifications go to one eventfd per queue (`KVM_IOEVENTFD`) while the BAR is mapped, and
//! the VMM thread's event loop serves the queue; where KVM refuses that, and for writes
//! through the PCI configuration access window, they are served on the vCPU thread that
//! writes the notify register. Each notification serves the queue until it is empty, with the
//! driver's notifications suppressed meanwhile (the used ring's flag, or `avail_event` with
//! VIRTIO_F_RING_EVENT_IDX), and interrupts only as the driver's `used_event` (or its
//! NO_INTERRUPT flag) allows. A guest that misprograms a queue gets `DEVICE_NEEDS_RESET` (and a configuration
//! interrupt); a malformed request gets `VIRTIO_BLK_S_IOERR`. Neither stops the VMM.

pub mod block;
pub mod common;
pub mod notify;
pub mod pci;
pub mod queue;

use std::sync::Arc;

use kvm_ioctls::VmFd;
use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;

/// "No MSI-X vector": the configuration's or a queue's vector when none is mapped (and the
/// driver's sign that a mapping failed).
pub const NO_VECTOR: u16 = 0xffff;
/// Device status: the guest noticed the device.
pub const STATUS_ACKNOWLEDGE: u8 = 1;
/// Device status: the guest has a driver.
pub const STATUS_DRIVER: u8 = 2;
/// Device status: the driver is ready.
pub const STATUS_DRIVER_OK: u8 = 4;
/// Device status: feature negotiation is complete.
pub const STATUS_FEATURES_OK: u8 = 8;
/// Device status: the device has met an error it cannot recover from without a reset.
pub const STATUS_DEVICE_NEEDS_RESET: u8 = 0x40;
/// Device status: the driver gave up.
pub const STATUS_FAILED: u8 = 0x80;

/// Feature bit: a descriptor may name a table of indirect descriptors (virtio 1.2, 2.7.5.3).
pub const VIRTIO_F_INDIRECT_DESC: u64 = 1 << 28;
/// Feature bit: the rings' `used_event` and `avail_event` fields suppress interrupts and
/// notifications (virtio 1.2, 2.7.7 and 2.7.10).
pub const VIRTIO_F_RING_EVENT_IDX: u64 = 1 << 29;
/// Feature bit: virtio 1.x (modern) device.
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;
/// The features the transport and its queues implement for every device.
pub const TRANSPORT_FEATURES: u64 =
    VIRTIO_F_VERSION_1 | VIRTIO_F_INDIRECT_DESC | VIRTIO_F_RING_EVENT_IDX;

/// ISR bit: a queue has used buffers.
pub const ISR_QUEUE: u8 = 1;
/// ISR bit: the configuration changed (or the device needs a reset).
pub const ISR_CONFIG: u8 = 2;

/// Virtio's PCI vendor ID.
pub const VIRTIO_PCI_VENDOR_ID: u16 = 0x1af4;
/// Modern virtio PCI device IDs are this plus the virtio device type.
pub const VIRTIO_PCI_DEVICE_ID_BASE: u16 = 0x1040;

/// Why a queue stopped being served (the device then needs a reset).
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The rings could not be read or written (bad avail index, used ring).
    #[error("queue error: {0}")]
    Queue(#[from] virtio_queue::Error),
    /// A malformed descriptor chain.
    #[error(transparent)]
    Chain(#[from] queue::ChainError),
    /// A chain without a device-writable byte for the status.
    #[error("request without a status byte")]
    NoStatus,
}

/// A level-triggered interrupt line (legacy INTx).
pub trait IrqLine: Send {
    /// Drives the line high (`true`) or low.
    fn set_level(&self, high: bool);
}

/// INTx on an IOAPIC/PIC pin of the in-kernel irqchip, through `KVM_IRQ_LINE`.
///
/// Level semantics matter for INTx: the line stays high until the driver reads the ISR,
/// and KVM's IOAPIC delivers again after an EOI while it is high. `KVM_IRQ_LINE` gives that
/// directly from the vCPU thread that handles the ISR read; an irqfd would need a resample
/// eventfd and a thread watching it for the same effect.
pub struct KvmIrqLine {
    vm_fd: Arc<VmFd>,
    gsi: u32,
}

impl KvmIrqLine {
    /// The line of `gsi`.
    pub fn new(vm_fd: Arc<VmFd>, gsi: u32) -> Self {
        KvmIrqLine { vm_fd, gsi }
    }
}

impl IrqLine for KvmIrqLine {
    fn set_level(&self, high: bool) {
        if let Err(e) = self.vm_fd.set_irq_line(self.gsi, high) {
            log::warn!("KVM_IRQ_LINE for GSI {}: {e}", self.gsi);
        }
    }
}

/// A virtio device type behind a transport.
pub trait VirtioDevice: Send {
    /// The virtio device type (2 = block).
    fn device_type(&self) -> u16;
    /// The PCI class code (class << 16 | subclass << 8 | interface).
    fn pci_class(&self) -> u32;
    /// The features the device offers.
    fn features(&self) -> u64;
    /// The largest size of each queue.
    fn queue_max_sizes(&self) -> &[u16];
    /// Size of the device-specific configuration.
    fn config_len(&self) -> usize;
    /// Reads the device-specific configuration; bytes past its end read as zero.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Writes the device-specific configuration (read-only by default).
    fn write_config(&mut self, _offset: u64, _data: &[u8]) {}
    /// The driver accepted `features` (FEATURES_OK).
    fn ack_features(&mut self, _features: u64) {}
    /// Serves the available buffers of queue `index`; returns whether any were used. An
    /// error means the queue is unusable: the transport sets DEVICE_NEEDS_RESET.
    fn process_queue(
        &mut self,
        index: usize,
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<bool, ProcessError>;
    /// The driver reset the device.
    fn reset(&mut self) {}
}
