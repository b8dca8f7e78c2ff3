//! Queue registers as the driver programs them, their checked activation into a
//! `virtio_queue::Queue`, and the collection of one descriptor chain with its checks.

use std::ops::Deref;

use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// Why a queue could not be enabled.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueueSetupError {
    /// Size zero, larger than the maximum, or not a power of two.
    #[error("queue size {0} is not a power of two up to the maximum")]
    Size(u16),
    /// An address with the wrong alignment.
    #[error("{0} address {1:#x} is misaligned")]
    Alignment(&'static str, u64),
    /// A ring that does not lie in guest RAM.
    #[error("descriptor table, available or used ring outside guest RAM")]
    OutsideRam,
}

/// What the driver wrote for one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRegs {
    /// Largest size the device supports.
    pub max_size: u16,
    /// Size the driver chose.
    pub size: u16,
    /// Descriptor table.
    pub desc: u64,
    /// Available (driver) ring.
    pub avail: u64,
    /// Used (device) ring.
    pub used: u64,
    /// queue_enable.
    pub enabled: bool,
    /// queue_msix_vector: the MSI-X vector of its used-buffer notifications, or
    /// [`NO_VECTOR`](super::common::NO_VECTOR).
    pub vector: u16,
}

impl QueueRegs {
    /// Registers after reset: size = maximum, addresses zero, disabled.
    pub fn new(max_size: u16) -> Self {
        QueueRegs {
            max_size,
            size: max_size,
            desc: 0,
            avail: 0,
            used: 0,
            enabled: false,
            vector: super::common::NO_VECTOR,
        }
    }

    /// Builds the queue the registers describe, checking size, alignment and that every
    /// ring lies in `mem`.
    pub fn activate(&self, mem: &GuestMemoryMmap) -> Result<Queue, QueueSetupError> {
        let mut q = Queue::new(self.max_size).map_err(|_| QueueSetupError::Size(self.max_size))?;
        q.try_set_size(self.size)
            .map_err(|_| QueueSetupError::Size(self.size))?;
        q.try_set_desc_table_address(GuestAddress(self.desc))
            .map_err(|_| QueueSetupError::Alignment("descriptor table", self.desc))?;
        q.try_set_avail_ring_address(GuestAddress(self.avail))
            .map_err(|_| QueueSetupError::Alignment("available ring", self.avail))?;
        q.try_set_used_ring_address(GuestAddress(self.used))
            .map_err(|_| QueueSetupError::Alignment("used ring", self.used))?;
        q.set_ready(true);
        if !q.is_valid(mem) {
            return Err(QueueSetupError::OutsideRam);
        }
        Ok(q)
    }
}

/// Why a descriptor chain was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    /// The chain has no descriptors (bad head index, unreadable table).
    #[error("empty descriptor chain")]
    Empty,
    /// The chain did not end: a loop, more descriptors than the queue size, an unreadable
    /// descriptor or a bad indirect table.
    #[error("descriptor chain does not end (loop, too long, or unreadable)")]
    Unterminated,
    /// A device-readable descriptor after a device-writable one.
    #[error("readable descriptor after a writable one")]
    Order,
    /// A buffer outside guest RAM.
    #[error("buffer {0:#x}+{1:#x} is outside guest RAM")]
    OutsideRam(u64, u32),
}

/// Collects the descriptors of `chain`, checking that it ends, that readable buffers come
/// before writable ones, and that every buffer lies in `mem`. The chain iterator bounds
/// the walk by the queue size, so a looping chain ends as `Unterminated`.
pub fn collect_chain<M>(
    chain: DescriptorChain<M>,
    mem: &GuestMemoryMmap,
) -> Result<Vec<Descriptor>, ChainError>
where
    M: Deref,
    M::Target: vm_memory::GuestMemory,
{
    let descs: Vec<Descriptor> = chain.collect();
    let last = descs.last().ok_or(ChainError::Empty)?;
    if last.has_next() {
        return Err(ChainError::Unterminated);
    }
    let mut seen_writable = false;
    for d in &descs {
        if d.is_write_only() {
            seen_writable = true;
        } else if seen_writable {
            return Err(ChainError::Order);
        }
        let len = usize::try_from(d.len()).unwrap_or(usize::MAX);
        if len > 0 && !GuestMemoryBackend::check_range(mem, d.addr(), len) {
            return Err(ChainError::OutsideRam(d.addr().0, d.len()));
        }
    }
    Ok(descs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use virtio_queue::QueueOwnedT;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap()
    }

    fn regs() -> QueueRegs {
        QueueRegs {
            size: 16,
            desc: 0x1000,
            avail: 0x2000,
            used: 0x3000,
            ..QueueRegs::new(256)
        }
    }

    #[test]
    fn good_registers_activate() {
        assert!(regs().activate(&mem()).is_ok());
    }

    #[test]
    fn bad_sizes_are_refused() {
        for size in [0, 3, 100, 512] {
            let r = QueueRegs { size, ..regs() };
            assert_eq!(r.activate(&mem()).unwrap_err(), QueueSetupError::Size(size));
        }
    }

    #[test]
    fn misaligned_rings_are_refused() {
        let r = QueueRegs {
            desc: 0x1008,
            ..regs()
        };
        assert!(matches!(
            r.activate(&mem()),
            Err(QueueSetupError::Alignment(..))
        ));
        let r = QueueRegs {
            avail: 0x2001,
            ..regs()
        };
        assert!(matches!(
            r.activate(&mem()),
            Err(QueueSetupError::Alignment(..))
        ));
        let r = QueueRegs {
            used: 0x3002,
            ..regs()
        };
        assert!(matches!(
            r.activate(&mem()),
            Err(QueueSetupError::Alignment(..))
        ));
    }

    #[test]
    fn rings_outside_ram_are_refused() {
        for r in [
            QueueRegs {
                desc: 0x10_0000,
                ..regs()
            },
            QueueRegs {
                avail: 0xffff_fff0,
                ..regs()
            },
            QueueRegs {
                used: 0x0ff_ff00,
                ..regs()
            },
            QueueRegs {
                desc: !0xf,
                ..regs()
            },
        ] {
            assert_eq!(r.activate(&mem()).unwrap_err(), QueueSetupError::OutsideRam);
        }
    }

    fn chain_of(descs: &[RawDescriptor]) -> Result<usize, ChainError> {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        let mut q: Queue = vq.create_queue().unwrap();
        vq.add_desc_chains(descs, 0).unwrap();
        let chain = q.iter(&m).unwrap().next().unwrap();
        collect_chain(chain, &m).map(|d| d.len())
    }

    fn raw(addr: u64, len: u32, flags: u32, next: u16) -> RawDescriptor {
        RawDescriptor::from(Descriptor::new(
            addr,
            len,
            u16::try_from(flags).unwrap(),
            next,
        ))
    }

    #[test]
    fn a_well_formed_chain_is_collected() {
        let d = chain_of(&[
            raw(0x8000, 16, VRING_DESC_F_NEXT, 1),
            raw(0x9000, 512, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 2),
            raw(0xa000, 1, VRING_DESC_F_WRITE, 0),
        ])
        .unwrap();
        assert_eq!(d, 3);
    }

    #[test]
    fn looping_chain_is_unterminated() {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        let mut q: Queue = vq.create_queue().unwrap();
        // Descriptor 0 -> 1 -> 0 -> ...
        vq.desc_table()
            .store(0, raw(0x8000, 16, VRING_DESC_F_NEXT, 1))
            .unwrap();
        vq.desc_table()
            .store(1, raw(0x9000, 16, VRING_DESC_F_NEXT, 0))
            .unwrap();
        vq.avail().ring().ref_at(0).unwrap().store(0);
        vq.avail().idx().store(1);
        let chain = q.iter(&m).unwrap().next().unwrap();
        assert_eq!(
            collect_chain(chain, &m).err(),
            Some(ChainError::Unterminated)
        );
    }

    #[test]
    fn next_index_beyond_the_queue_is_unterminated() {
        let r = chain_of(&[
            raw(0x8000, 16, VRING_DESC_F_NEXT, 1),
            raw(0x9000, 1, VRING_DESC_F_NEXT, 40),
        ]);
        assert_eq!(r, Err(ChainError::Unterminated));
    }

    #[test]
    fn readable_after_writable_is_refused() {
        let r = chain_of(&[
            raw(0x8000, 16, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1),
            raw(0x9000, 16, 0, 0),
        ]);
        assert_eq!(r, Err(ChainError::Order));
    }

    #[test]
    fn buffers_outside_ram_are_refused() {
        let r = chain_of(&[raw(0xf_fff0, 0x20, 0, 0)]);
        assert_eq!(r, Err(ChainError::OutsideRam(0xf_fff0, 0x20)));
        let r = chain_of(&[raw(u64::MAX - 4, 16, 0, 0)]);
        assert!(matches!(r, Err(ChainError::OutsideRam(..))));
    }
}
