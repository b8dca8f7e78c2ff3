//! MSI-X (PCI Local Bus 3.0, 6.8.2): the capability in configuration space, the vector table
//! and the pending-bit array (PBA) in a BAR, and delivery as `KVM_SIGNAL_MSI` messages.
//!
//! A device asks for vector `v`. The message goes out at once if MSI-X is enabled and neither
//! the function (Message Control bit 14) nor the entry (Vector Control bit 0) is masked;
//! otherwise the vector's pending bit is set, and the message goes out when the guest unmasks
//! the entry or the function, as the specification requires. Entries start masked.
//!
//! The guest owns the table: whatever it writes there is what the VMM sends, and KVM routes
//! the message like any MSI write of this VM (destination APIC ID and vector from the address
//! and data), so a misprogrammed entry can only interrupt the VM's own vCPUs. A vector the
//! device asks for beyond the table is dropped here.

use std::sync::Arc;

use kvm_bindings::kvm_msi;
use kvm_ioctls::VmFd;

use super::config::{ConfigSpace, ConfigSpaceError};
use crate::bytes::le_u32;

/// The MSI-X capability ID.
pub const CAP_ID_MSIX: u8 = 0x11;
/// Bytes per table entry: message address (low, high), message data, vector control.
pub const ENTRY_SIZE: usize = 16;
/// Most vectors a function may have.
pub const MAX_VECTORS: u16 = 2048;
/// Message Control: MSI-X enable.
pub const CONTROL_ENABLE: u16 = 1 << 15;
/// Message Control: function mask.
pub const CONTROL_FUNCTION_MASK: u16 = 1 << 14;
/// Vector Control: the entry is masked.
pub const ENTRY_MASKED: u32 = 1;

/// One message: a DWORD write of `data` at `address`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsiMessage {
    /// The address (for x86, 0xFEEx_xxxx: destination APIC ID in bits 19:12).
    pub address: u64,
    /// The data (for x86, the vector in bits 7:0 and the delivery mode).
    pub data: u32,
}

/// Why a message was not delivered (an errno from `KVM_SIGNAL_MSI`).
pub type MsiError = kvm_ioctls::Error;

/// Where messages go.
pub trait MsiSink: Send {
    /// Delivers `msg`: `true` if it was taken, `false` if the guest blocked it.
    fn send(&self, msg: MsiMessage) -> Result<bool, MsiError>;
}

/// Sends `msg` through `KVM_SIGNAL_MSI` (the in-kernel irqchip routes it): `true` if a local
/// APIC took it, `false` if the guest blocked it (its APIC software-disabled, say).
pub fn signal_msi(vm_fd: &VmFd, msg: MsiMessage) -> Result<bool, MsiError> {
    let msi = kvm_msi {
        address_lo: u32::try_from(msg.address & 0xffff_ffff).unwrap_or(0),
        address_hi: u32::try_from(msg.address >> 32).unwrap_or(0),
        data: msg.data,
        ..Default::default()
    };
    vm_fd.signal_msi(msi).map(|n| n > 0)
}

/// Messages to the VM's in-kernel irqchip.
pub struct KvmMsi(pub Arc<VmFd>);

impl MsiSink for KvmMsi {
    fn send(&self, msg: MsiMessage) -> Result<bool, MsiError> {
        signal_msi(&self.0, msg)
    }
}

/// Where a function's MSI-X structures are. Offsets must be multiples of 8 (their low three
/// bits hold the BAR number in the capability).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsixLayout {
    /// Table entries (1..=[`MAX_VECTORS`]).
    pub vectors: u16,
    /// The BAR holding the table and the PBA.
    pub bar: u8,
    /// Offset of the table in the BAR (a multiple of 8).
    pub table: u32,
    /// Offset of the PBA in the BAR (a multiple of 8).
    pub pba: u32,
}

/// What became of a request for a vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The message was sent (taken, or blocked by the guest).
    Sent,
    /// Masked (or MSI-X disabled): the pending bit is set.
    Pending,
    /// No such vector.
    NoVector,
    /// KVM refused the message (the first refusal is logged).
    Failed,
}

/// Counts, for the end-of-run summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsixStats {
    /// Messages sent and taken by a local APIC.
    pub sent: u64,
    /// Messages sent but blocked by the guest (no APIC would take them).
    pub blocked: u64,
    /// Requests that found their vector masked and left it pending.
    pub held: u64,
    /// Messages KVM refused.
    pub failed: u64,
}

/// A function's MSI-X state.
pub struct Msix {
    /// Offset of the capability in configuration space.
    cap: usize,
    table: Vec<u8>,
    pending: Vec<bool>,
    sink: Box<dyn MsiSink>,
    stats: MsixStats,
}

impl Msix {
    /// Adds the capability for `layout` to `config`: Message Control's enable and function
    /// mask bits writable, the table size read-only; every entry masked.
    pub fn add(
        config: &mut ConfigSpace,
        layout: MsixLayout,
        sink: Box<dyn MsiSink>,
    ) -> Result<Msix, ConfigSpaceError> {
        debug_assert!(
            layout.table.is_multiple_of(8) && layout.pba.is_multiple_of(8),
            "{layout:?}"
        );
        let vectors = layout.vectors.clamp(1, MAX_VECTORS);
        let mut body = vec![CAP_ID_MSIX, 0];
        body.extend_from_slice(&(vectors - 1).to_le_bytes());
        body.extend_from_slice(&(layout.table | u32::from(layout.bar & 7)).to_le_bytes());
        body.extend_from_slice(&(layout.pba | u32::from(layout.bar & 7)).to_le_bytes());
        let cap = config.add_capability(&body)?;
        config.set_write_mask(cap + 3, 0xc0);
        let mut table = vec![0u8; usize::from(vectors) * ENTRY_SIZE];
        for entry in table.chunks_mut(ENTRY_SIZE) {
            entry[12..16].copy_from_slice(&ENTRY_MASKED.to_le_bytes());
        }
        Ok(Msix {
            cap,
            table,
            pending: vec![false; usize::from(vectors)],
            sink,
            stats: MsixStats::default(),
        })
    }

    /// Offset of the capability in configuration space.
    pub fn capability(&self) -> usize {
        self.cap
    }

    /// Table entries: the device may ask for vectors below this.
    pub fn vectors(&self) -> u16 {
        u16::try_from(self.pending.len()).unwrap_or(MAX_VECTORS)
    }

    /// Forgets every pending message (the device was reset: what it had to say is void).
    pub fn clear_pending(&mut self) {
        self.pending.fill(false);
    }

    fn control(&self, config: &ConfigSpace) -> u16 {
        config.u16_at(self.cap + 2)
    }

    /// MSI-X is enabled (the function's INTx is then off).
    pub fn enabled(&self, config: &ConfigSpace) -> bool {
        self.control(config) & CONTROL_ENABLE != 0
    }

    /// The dword at `at` of entry `vector` (0 for an entry the table lacks; callers check).
    fn word(&self, vector: usize, at: usize) -> u32 {
        le_u32(&self.table, vector * ENTRY_SIZE + at).unwrap_or(0)
    }

    fn message(&self, vector: usize) -> MsiMessage {
        MsiMessage {
            address: u64::from(self.word(vector, 0)) | (u64::from(self.word(vector, 4)) << 32),
            data: self.word(vector, 8),
        }
    }

    fn masked(&self, config: &ConfigSpace, vector: usize) -> bool {
        let control = self.control(config);
        control & CONTROL_ENABLE == 0
            || control & CONTROL_FUNCTION_MASK != 0
            || self.word(vector, 12) & ENTRY_MASKED != 0
    }

    fn send(&mut self, vector: usize) -> Delivery {
        let msg = self.message(vector);
        match self.sink.send(msg) {
            Ok(taken) => {
                if taken {
                    self.stats.sent += 1;
                } else {
                    self.stats.blocked += 1;
                }
                Delivery::Sent
            }
            Err(e) => {
                if self.stats.failed == 0 {
                    log::warn!("MSI-X vector {vector}: message {msg:x?} refused: {e}");
                }
                self.stats.failed += 1;
                Delivery::Failed
            }
        }
    }

    /// The device asks for `vector`: sends its message, or leaves it pending while masked.
    pub fn trigger(&mut self, config: &ConfigSpace, vector: u16) -> Delivery {
        let v = usize::from(vector);
        if v >= self.pending.len() {
            return Delivery::NoVector;
        }
        if self.masked(config, v) {
            self.pending[v] = true;
            self.stats.held += 1;
            return Delivery::Pending;
        }
        self.send(v)
    }

    /// Sends every pending message whose vector is no longer masked.
    fn flush(&mut self, config: &ConfigSpace) {
        for v in 0..self.pending.len() {
            if self.pending[v] && !self.masked(config, v) {
                self.pending[v] = false;
                self.send(v);
            }
        }
    }

    /// Configuration space was written (Message Control may have changed).
    pub fn config_written(&mut self, config: &ConfigSpace) {
        self.flush(config);
    }

    /// Reads the table at `offset`; bytes past its end read as zero.
    pub fn read_table(&self, offset: u64, data: &mut [u8]) {
        crate::bytes::read_padded(&self.table, offset, data);
    }

    /// Writes the table at `offset` (any width; bytes past its end are dropped), then sends
    /// what an unmask released. Of Vector Control only the mask bit is kept (bits 31:1 are
    /// reserved and read as zero).
    pub fn write_table(&mut self, config: &ConfigSpace, offset: u64, data: &[u8]) {
        let Ok(start) = usize::try_from(offset) else {
            return;
        };
        for (i, b) in data.iter().enumerate() {
            let Some(at) = start.checked_add(i).filter(|a| *a < self.table.len()) else {
                break;
            };
            self.table[at] = match at % ENTRY_SIZE {
                12 => b & 1,
                13..=15 => 0,
                _ => *b,
            };
        }
        self.flush(config);
    }

    /// Reads the PBA at `offset` (one bit per vector, in 64-bit words); bytes past it read
    /// as zero. The PBA is read-only.
    pub fn read_pba(&self, offset: u64, data: &mut [u8]) {
        let mut pba = vec![0u8; self.pending.len().div_ceil(64) * 8];
        for (v, _) in self.pending.iter().enumerate().filter(|(_, p)| **p) {
            pba[v / 8] |= 1 << (v % 8);
        }
        crate::bytes::read_padded(&pba, offset, data);
    }

    /// What was sent and held.
    pub fn stats(&self) -> MsixStats {
        self.stats
    }
}

/// A sink for tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::{Arc, Mutex};

    use super::{MsiError, MsiMessage, MsiSink};

    #[derive(Default)]
    struct State {
        sent: Vec<MsiMessage>,
        refuse: bool,
    }

    /// Records the messages it is given; refuses them after [`Recorder::refuse`].
    #[derive(Clone, Default)]
    pub(crate) struct Recorder(Arc<Mutex<State>>);

    impl MsiSink for Recorder {
        fn send(&self, msg: MsiMessage) -> Result<bool, MsiError> {
            let mut g = self.0.lock().unwrap();
            if g.refuse {
                return Err(MsiError::new(libc::EINVAL));
            }
            g.sent.push(msg);
            Ok(true)
        }
    }

    impl Recorder {
        /// What was sent, in order.
        pub(crate) fn sent(&self) -> Vec<MsiMessage> {
            self.0.lock().unwrap().sent.clone()
        }

        /// Refuses every later message.
        pub(crate) fn refuse(&self) {
            self.0.lock().unwrap().refuse = true;
        }
    }
}

#[cfg(test)]
mod tests;
