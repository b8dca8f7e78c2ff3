//! The virtio block device (virtio 1.2, 5.2) on a raw or qcow2 image: read, write, flush,
//! get-id, discard, write-zeroes, read-only mode; one request queue. The device serves
//! requests through [`disk::DiskBackend`] and does not know the image's format.

pub mod discard;
pub mod disk;
pub mod execute;
mod file;
mod image;
pub mod qcow2;
pub mod qcow2_header;
pub mod qcow2_refcounts;
pub mod request;
mod snapshot;

use std::sync::{Arc, Mutex};

use kvm_ioctls::VmFd;
use virtio_queue::{Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestMemoryMmap};

use super::notify::{NotifyRoute, QueueEventWatch, QueueEvents};
use super::pci::{VirtioPciDevice, NOTIFY_MULTIPLIER, NOTIFY_OFFSET};
use super::queue::collect_chain;
use super::{IrqLine, KvmIrqLine, ProcessError, VirtioDevice};
use crate::pci::msix::{KvmMsi, MsiSink};
use crate::pci::{devfn, intx_gsi, ConfigSpaceError, PciError, PciRoot};
use disk::DiskError;
use disk::{DiskImage, SECTOR_SIZE};
use execute::execute;
use request::{parse, status_address, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};

pub use disk::{DiskConfig, DiskFormat};

/// Virtio device type of a block device.
pub const VIRTIO_ID_BLOCK: u16 = 2;
/// Feature: seg_max is valid.
pub const VIRTIO_BLK_F_SEG_MAX: u64 = 1 << 2;
/// Feature: the device is read-only.
pub const VIRTIO_BLK_F_RO: u64 = 1 << 5;
/// Feature: blk_size is valid.
pub const VIRTIO_BLK_F_BLK_SIZE: u64 = 1 << 6;
/// Feature: FLUSH is supported.
pub const VIRTIO_BLK_F_FLUSH: u64 = 1 << 9;
/// Feature: DISCARD is supported (max_discard_* and discard_sector_alignment are valid).
pub const VIRTIO_BLK_F_DISCARD: u64 = 1 << 13;
/// Feature: WRITE_ZEROES is supported (max_write_zeroes_* and write_zeroes_may_unmap are
/// valid).
pub const VIRTIO_BLK_F_WRITE_ZEROES: u64 = 1 << 14;
/// Size of the request queue.
pub const QUEUE_SIZE: u16 = 256;
/// Size of the configuration the device exposes (capacity .. write_zeroes_may_unmap and
/// its padding).
pub const CONFIG_LEN: usize = 60;

/// Errors attaching a disk.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The image could not be used.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// No room on the PCI bus.
    #[error(transparent)]
    Pci(#[from] PciError),
    /// The device's configuration space (a VMM bug).
    #[error("virtio-blk configuration space")]
    Config(#[from] ConfigSpaceError),
}

/// Where a disk was attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachedDisk {
    /// PCI slot on bus 0 (function 0).
    pub slot: u8,
    /// The GSI its INTA# raises (also in its interrupt line register).
    pub gsi: u8,
}

/// Opens `disk` and puts a virtio-blk device for it in the next free slot of `root` (see
/// [`attach_image`]): its INTA# through `KVM_IRQ_LINE`, its MSI-X messages through
/// `KVM_SIGNAL_MSI`, its notifications through `KVM_IOEVENTFD`.
pub fn attach_block(
    root: &PciRoot,
    vm_fd: &Arc<VmFd>,
    mem: &GuestMemoryMmap,
    disk: &DiskConfig,
) -> Result<BlockAttachment, AttachError> {
    let image = disk::DiskImage::open(disk)?;
    let irq_fd = vm_fd.clone();
    let interrupts = Interrupts {
        intx: Box::new(move |gsi| Box::new(KvmIrqLine::new(irq_fd, u32::from(gsi)))),
        msi: Box::new(KvmMsi(vm_fd.clone())),
    };
    let attached = attach_image(root, mem, image, vm_fd.clone(), interrupts)?;
    log::info!(
        "virtio-blk {} at 00:{:02x}.0, INTA# on GSI {}{}",
        disk.path.display(),
        attached.at.slot,
        attached.at.gsi,
        if disk.readonly {
            ", read-only"
        } else if disk.snapshot {
            ", snapshot (writes go to a temporary overlay)"
        } else {
            ""
        }
    );
    Ok(attached)
}

/// Where a device's interrupts go.
pub struct Interrupts {
    /// The INTx line of a GSI.
    pub intx: Box<dyn FnOnce(u8) -> Box<dyn IrqLine>>,
    /// MSI-X messages.
    pub msi: Box<dyn MsiSink>,
}

/// Puts a virtio-blk device for `image` in the next free slot of `root`, its INTA# raising
/// `interrupts.intx(gsi)` for the GSI `intx_gsi` gives for that slot and its MSI-X messages
/// going to `interrupts.msi`. Its BAR appears on the MMIO bus once the guest (or firmware)
/// enables it; its queue notifications then go to eventfds through `route`, or exit to the
/// device if `route` or the eventfds fail.
pub fn attach_image(
    root: &PciRoot,
    mem: &GuestMemoryMmap,
    image: DiskImage,
    route: Arc<dyn NotifyRoute>,
    interrupts: Interrupts,
) -> Result<BlockAttachment, AttachError> {
    let slot = root.free_slot()?;
    let gsi = intx_gsi(slot, 1);
    let irq = (interrupts.intx)(gsi);
    let device = BlockDevice::new(image);
    let mut device = VirtioPciDevice::new(device, mem.clone(), irq, interrupts.msi, gsi)?;
    let stride = u64::from(NOTIFY_MULTIPLIER);
    let events = QueueEvents::new(route, 1, NOTIFY_OFFSET, stride)
        .and_then(|q| q.watch_fds().map(|w| (q, w)));
    let watch_fds = match events {
        Ok((q, w)) => {
            device = device.with_queue_events(q);
            Some(w)
        }
        Err(e) => {
            log::warn!("virtio-blk: no eventfd ({e}); notifications are served on the vCPU thread");
            None
        }
    };
    let device = Arc::new(Mutex::new(device));
    root.add_device(devfn(slot, 0), "virtio-blk", device.clone())?;
    let watch = watch_fds.map(|w| QueueEventWatch::new(device.clone(), w));
    Ok(BlockAttachment {
        at: AttachedDisk { slot, gsi },
        device,
        watch,
    })
}

/// A virtio-blk device behind its transport, as the VM holds it.
pub type BlockPciDevice = VirtioPciDevice<BlockDevice>;

/// What [`attach_block`] set up.
pub struct BlockAttachment {
    /// Where the disk is.
    pub at: AttachedDisk,
    /// The device, for its statistics.
    pub device: Arc<Mutex<BlockPciDevice>>,
    /// The event-loop subscriber serving its queue notifications, if they go to eventfds.
    pub watch: Option<QueueEventWatch>,
}

impl BlockAttachment {
    /// Serves what the guest made available before the VM stopped, in case the event loop
    /// ended before it read the notification (a request notified just before the stop).
    pub fn serve_pending(&self) {
        self.device
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .serve_pending();
    }

    /// The run is over: writes back what the image's backend caches (a qcow2 image's tables).
    /// A failure is logged: the guest's run is over either way.
    pub fn close(&self) {
        let mut d = self.device.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = d.device_mut().close() {
            log::error!(
                "virtio-blk 00:{:02x}.0: writing the image back failed: {e}",
                self.at.slot
            );
        }
    }

    /// One line on what the device served, for the end of a run.
    pub fn summary(&self) -> String {
        let d = self.device.lock().unwrap_or_else(|e| e.into_inner());
        let (s, n, i) = (d.device().stats(), d.notify_counts(), d.interrupt_counts());
        format!(
            "virtio-blk 00:{:02x}.0: {} requests OK, {} IOERR, {} UNSUPP; notifications: {} by \
             ioeventfd, {} by exit, {} ignored; interrupts: {} INTx, {} MSI-X ({} held while \
             masked, {} blocked, {} refused)",
            self.at.slot,
            s.ok,
            s.errors,
            s.unsupported,
            n.by_event,
            n.by_exit,
            d.ignored_notifies(),
            i.intx,
            i.msix.sent,
            i.msix.held,
            i.msix.blocked,
            i.msix.failed
        )
    }
}

/// Counts of what the device has served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStats {
    /// Requests answered VIRTIO_BLK_S_OK.
    pub ok: u64,
    /// Requests answered VIRTIO_BLK_S_IOERR.
    pub errors: u64,
    /// Requests answered VIRTIO_BLK_S_UNSUPP.
    pub unsupported: u64,
}

/// The block device.
pub struct BlockDevice {
    disk: DiskImage,
    stats: BlockStats,
}

impl BlockDevice {
    /// A device serving `disk`.
    pub fn new(disk: DiskImage) -> Self {
        BlockDevice {
            disk,
            stats: BlockStats::default(),
        }
    }

    /// What it has served.
    pub fn stats(&self) -> BlockStats {
        self.stats
    }

    /// Writes back what the image's backend caches.
    pub fn close(&mut self) -> std::io::Result<()> {
        self.disk.backend.close()
    }

    fn config_bytes(&self) -> [u8; CONFIG_LEN] {
        let mut c = [0u8; CONFIG_LEN];
        c[0..8].copy_from_slice(&self.disk.sectors.to_le_bytes());
        // size_max (8) is not offered; seg_max leaves room for the header and status.
        c[12..16].copy_from_slice(&u32::from(QUEUE_SIZE - 2).to_le_bytes());
        c[20..24].copy_from_slice(&u32::try_from(SECTOR_SIZE).unwrap_or(512).to_le_bytes());
        // Geometry, topology, writeback and num_queues (16..20, 24..36) are not offered.
        let u32s = [
            (36, discard::MAX_RANGE_SECTORS),
            (40, discard::MAX_RANGES),
            (44, discard::DISCARD_ALIGNMENT_SECTORS),
            (48, discard::MAX_RANGE_SECTORS),
            (52, discard::MAX_RANGES),
        ];
        for (at, v) in u32s {
            c[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        c[56] = 1; // write_zeroes_may_unmap
        c
    }

    /// Serves one chain of at most `max` descriptors; returns the used length (bytes
    /// written to guest buffers).
    fn serve<M>(
        &mut self,
        chain: virtio_queue::DescriptorChain<M>,
        mem: &GuestMemoryMmap,
        max: u16,
    ) -> Result<u32, ProcessError>
    where
        M: std::ops::Deref,
        M::Target: vm_memory::GuestMemory,
    {
        let descs = collect_chain(chain, mem, max)?;
        let status_addr = status_address(&descs).ok_or(ProcessError::NoStatus)?;
        let result =
            parse(&descs, mem, status_addr).and_then(|req| execute(&req, &mut self.disk, mem));
        let (status, written) = match result {
            Ok(n) => {
                self.stats.ok += 1;
                (VIRTIO_BLK_S_OK, n)
            }
            Err(e) if e.unsupported() => {
                log::debug!("virtio-blk: {e}");
                self.stats.unsupported += 1;
                (VIRTIO_BLK_S_UNSUPP, 0)
            }
            Err(e) => {
                log::debug!("virtio-blk: request failed: {e}");
                self.stats.errors += 1;
                (VIRTIO_BLK_S_IOERR, 0)
            }
        };
        // In RAM: collect_chain checked every buffer.
        mem.write_obj(status, status_addr)
            .map_err(virtio_queue::Error::GuestMemory)?;
        Ok(u32::try_from(written + 1).unwrap_or(u32::MAX))
    }
}

impl VirtioDevice for BlockDevice {
    fn device_type(&self) -> u16 {
        VIRTIO_ID_BLOCK
    }

    fn pci_class(&self) -> u32 {
        // Mass storage, SCSI (as QEMU's virtio-blk).
        0x01_00_00
    }

    fn features(&self) -> u64 {
        let writes = if self.disk.readonly {
            VIRTIO_BLK_F_RO
        } else {
            VIRTIO_BLK_F_DISCARD | VIRTIO_BLK_F_WRITE_ZEROES
        };
        VIRTIO_BLK_F_SEG_MAX | VIRTIO_BLK_F_BLK_SIZE | VIRTIO_BLK_F_FLUSH | writes
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[QUEUE_SIZE]
    }

    fn config_len(&self) -> usize {
        CONFIG_LEN
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        crate::bytes::read_padded(&self.config_bytes(), offset, data);
    }

    fn process_queue(
        &mut self,
        _index: usize,
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Result<bool, ProcessError> {
        // One pass over what is available now (at most the queue size); the transport
        // calls again for anything the driver adds meanwhile. A chain (indirect tables
        // included) may hold seg_max + 2 descriptors whatever size the driver chose.
        let max = queue.max_size();
        let chains: Vec<_> = queue.iter(mem)?.collect();
        let any = !chains.is_empty();
        for chain in chains {
            let head = chain.head_index();
            let used = self.serve(chain, mem, max)?;
            queue.add_used(mem, head, used)?;
        }
        Ok(any)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod discard_tests;
