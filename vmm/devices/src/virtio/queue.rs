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
    /// [`NO_VECTOR`](super::NO_VECTOR).
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
            vector: super::NO_VECTOR,
        }
    }

    /// Builds the queue the registers describe, checking size, alignment and that every
    /// ring (with its event field) lies in `mem`; `event_idx`: VIRTIO_F_RING_EVENT_IDX was
    /// negotiated.
    pub fn activate(
        &self,
        mem: &GuestMemoryMmap,
        event_idx: bool,
    ) -> Result<Queue, QueueSetupError> {
        let mut q = Queue::new(self.max_size).map_err(|_| QueueSetupError::Size(self.max_size))?;
        q.try_set_size(self.size)
            .map_err(|_| QueueSetupError::Size(self.size))?;
        q.try_set_desc_table_address(GuestAddress(self.desc))
            .map_err(|_| QueueSetupError::Alignment("descriptor table", self.desc))?;
        q.try_set_avail_ring_address(GuestAddress(self.avail))
            .map_err(|_| QueueSetupError::Alignment("available ring", self.avail))?;
        q.try_set_used_ring_address(GuestAddress(self.used))
            .map_err(|_| QueueSetupError::Alignment("used ring", self.used))?;
        q.set_event_idx(event_idx);
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
    /// More descriptors than the device's queue size, through an indirect table (virtio
    /// 1.2, 2.7.5.3.1: a chain is never longer than the queue).
    #[error("descriptor chain longer than {0} descriptors")]
    TooLong(u16),
}

/// Collects the descriptors of `chain`, checking that it ends, that it holds at most `max`
/// descriptors (the device's largest queue size: a direct chain is bounded by the size the
/// driver chose anyway), that readable buffers come before writable ones, and that every
/// buffer lies in `mem`.
///
/// The chain iterator follows an indirect table (VIRTIO_F_INDIRECT_DESC) in place of the
/// descriptor naming it, and ends the walk early on a nested indirect table, a table whose
/// length is not a multiple of 16 or that is unreadable, and after as many descriptors as
/// the queue (or the indirect table) holds: each of those leaves a last descriptor that
/// still says NEXT, or none, so it is refused as `Unterminated` or `Empty`. A looping chain
/// ends the same way.
pub fn collect_chain<M>(
    chain: DescriptorChain<M>,
    mem: &GuestMemoryMmap,
    max: u16,
) -> Result<Vec<Descriptor>, ChainError>
where
    M: Deref,
    M::Target: vm_memory::GuestMemory,
{
    let descs: Vec<Descriptor> = chain.take(usize::from(max) + 1).collect();
    if descs.len() > usize::from(max) {
        return Err(ChainError::TooLong(max));
    }
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
    use virtio_bindings::bindings::virtio_ring::{
        VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
    };
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use virtio_queue::QueueOwnedT;
    use vm_memory::Bytes;

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
        assert!(regs().activate(&mem(), false).is_ok());
    }

    #[test]
    fn bad_sizes_are_refused() {
        for size in [0, 3, 100, 512] {
            let r = QueueRegs { size, ..regs() };
            assert_eq!(
                r.activate(&mem(), false).unwrap_err(),
                QueueSetupError::Size(size)
            );
        }
    }

    #[test]
    fn misaligned_rings_are_refused() {
        let r = QueueRegs {
            desc: 0x1008,
            ..regs()
        };
        assert!(matches!(
            r.activate(&mem(), false),
            Err(QueueSetupError::Alignment(..))
        ));
        let r = QueueRegs {
            avail: 0x2001,
            ..regs()
        };
        assert!(matches!(
            r.activate(&mem(), false),
            Err(QueueSetupError::Alignment(..))
        ));
        let r = QueueRegs {
            used: 0x3002,
            ..regs()
        };
        assert!(matches!(
            r.activate(&mem(), false),
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
            assert_eq!(
                r.activate(&mem(), false).unwrap_err(),
                QueueSetupError::OutsideRam
            );
        }
    }

    fn chain_of(descs: &[RawDescriptor]) -> Result<usize, ChainError> {
        chain_at(&mem(), descs).map(|d| d.len())
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
            collect_chain(chain, &m, 16).err(),
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

    const TABLE: u64 = 0x6000;

    /// Writes `descs` as an indirect table at TABLE (their `next` fields as given).
    fn indirect_table(m: &GuestMemoryMmap, descs: &[RawDescriptor]) {
        for (i, d) in descs.iter().enumerate() {
            m.write_obj(*d, GuestAddress(TABLE + 16 * i as u64))
                .unwrap();
        }
    }

    /// Collects the one chain made of `head` (and whatever indirect table it names) in a
    /// 16-entry queue.
    fn chain_at(
        m: &GuestMemoryMmap,
        head: &[RawDescriptor],
    ) -> Result<Vec<Descriptor>, ChainError> {
        let vq = MockSplitQueue::new(m, 16);
        let mut q: Queue = vq.create_queue().unwrap();
        vq.add_desc_chains(head, 0).unwrap();
        let chain = q.iter(m).unwrap().next().unwrap();
        collect_chain(chain, m, 16)
    }

    #[test]
    fn an_indirect_table_is_followed_in_place_of_its_descriptor() {
        let m = mem();
        indirect_table(
            &m,
            &[
                raw(0x8000, 16, VRING_DESC_F_NEXT, 1),
                raw(0x9000, 512, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 2),
                raw(0xa000, 1, VRING_DESC_F_WRITE, 0),
            ],
        );
        let d = chain_at(&m, &[raw(TABLE, 48, VRING_DESC_F_INDIRECT, 0)]).unwrap();
        let addrs: Vec<u64> = d.iter().map(|d| d.addr().0).collect();
        assert_eq!(addrs, [0x8000, 0x9000, 0xa000]);
        assert!(d[1].is_write_only() && !d[0].is_write_only());
        // The WRITE flag of the descriptor naming the table is ignored (2.7.5.3.2).
        let flags = VRING_DESC_F_INDIRECT | VRING_DESC_F_WRITE;
        let again = chain_at(&m, &[raw(TABLE, 48, flags, 0)]).unwrap();
        let key = |d: &[Descriptor]| -> Vec<(u64, u32, u16)> {
            d.iter().map(|d| (d.addr().0, d.len(), d.flags())).collect()
        };
        assert_eq!(key(&again), key(&d));
        // Direct descriptors first, then a table for the rest (virtio 1.2, 2.7.5.3.2).
        indirect_table(
            &m,
            &[
                raw(0x9000, 512, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 1),
                raw(0xa000, 1, VRING_DESC_F_WRITE, 0),
            ],
        );
        let d = chain_at(
            &m,
            &[
                raw(0x8000, 16, VRING_DESC_F_NEXT, 1),
                raw(TABLE, 32, VRING_DESC_F_INDIRECT, 0),
            ],
        )
        .unwrap();
        let addrs: Vec<u64> = d.iter().map(|d| d.addr().0).collect();
        assert_eq!(addrs, [0x8000, 0x9000, 0xa000]);
    }

    #[test]
    fn a_nested_misshapen_or_unreadable_indirect_table_is_refused() {
        let m = mem();
        // A table naming another table.
        indirect_table(
            &m,
            &[
                raw(0x8000, 16, VRING_DESC_F_NEXT, 1),
                raw(TABLE, 32, VRING_DESC_F_INDIRECT, 0),
            ],
        );
        assert_eq!(
            chain_at(&m, &[raw(TABLE, 32, VRING_DESC_F_INDIRECT, 0)]).err(),
            Some(ChainError::Unterminated)
        );
        // A length that is not a whole number of descriptors, an empty table, a table
        // outside RAM.
        for (addr, len) in [(TABLE, 24), (TABLE, 0), (0x10_0000, 32)] {
            assert_eq!(
                chain_at(&m, &[raw(addr, len, VRING_DESC_F_INDIRECT, 0)]).err(),
                Some(ChainError::Empty),
                "table {addr:#x}+{len}"
            );
        }
        // A `next` beyond the table's end.
        indirect_table(
            &m,
            &[raw(0x8000, 16, VRING_DESC_F_NEXT, 2), raw(0, 0, 0, 0)],
        );
        assert_eq!(
            chain_at(&m, &[raw(TABLE, 32, VRING_DESC_F_INDIRECT, 0)]).err(),
            Some(ChainError::Unterminated)
        );
    }

    #[test]
    fn an_indirect_table_longer_than_the_queue_is_refused() {
        let m = mem();
        let table = |n: u16| -> Vec<RawDescriptor> {
            (0..n)
                .map(|i| {
                    let last = i + 1 == n;
                    let flags = if last { 0 } else { VRING_DESC_F_NEXT };
                    raw(0x8000, 16, flags, if last { 0 } else { i + 1 })
                })
                .collect()
        };
        indirect_table(&m, &table(16));
        assert_eq!(
            chain_at(&m, &[raw(TABLE, 16 * 16, VRING_DESC_F_INDIRECT, 0)]).map(|d| d.len()),
            Ok(16),
            "as long as the queue"
        );
        indirect_table(&m, &table(17));
        assert_eq!(
            chain_at(&m, &[raw(TABLE, 17 * 16, VRING_DESC_F_INDIRECT, 0)]).err(),
            Some(ChainError::TooLong(16))
        );
        // Counted with the direct descriptors before the table.
        indirect_table(&m, &table(16));
        assert_eq!(
            chain_at(
                &m,
                &[
                    raw(0x8000, 16, VRING_DESC_F_NEXT, 1),
                    raw(TABLE, 16 * 16, VRING_DESC_F_INDIRECT, 0),
                ],
            )
            .err(),
            Some(ChainError::TooLong(16))
        );
    }

    #[test]
    fn buffers_outside_ram_are_refused() {
        let r = chain_of(&[raw(0xf_fff0, 0x20, 0, 0)]);
        assert_eq!(r, Err(ChainError::OutsideRam(0xf_fff0, 0x20)));
        let r = chain_of(&[raw(u64::MAX - 4, 16, 0, 0)]);
        assert!(matches!(r, Err(ChainError::OutsideRam(..))));
    }
}
