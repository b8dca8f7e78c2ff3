//! The hypercall doorbell (docs/abi.md section 3): 8 ports at the ABI's base. A 32-bit write to
//! base+4 latches the high dword of a request block's address for the writing vCPU; a 32-bit
//! write to base+0 rings with the low dword. The ring is latched here and run by the vCPU
//! right after the exit (it needs the vCPU's registers), before the vCPU re-enters the guest:
//! the call completes before the OUT retires. Reads: base+0 gives the magic, base+4 the
//! status of the vCPU's last ring.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use profile_core::abi::{DOORBELL_HIGH, DOORBELL_MAGIC, DOORBELL_RING};

use devices::bus::Origin;
use devices::BusDevice;

/// Per-vCPU doorbell state.
#[derive(Clone, Copy, Debug, Default)]
struct Lane {
    high: u32,
    pending: Option<u64>,
    last_status: u32,
}

/// The device.
#[derive(Debug)]
pub struct Doorbell {
    lanes: Vec<Lane>,
    /// Set for a vCPU when it rang, so the vCPU can check for a call after each exit without
    /// taking the device's lock.
    rung: Arc<[AtomicBool]>,
}

/// The vCPUs' side of the doorbell: the device and the per-vCPU "rang" flags.
#[derive(Clone, Debug)]
pub struct DoorbellHandle {
    device: Arc<Mutex<Doorbell>>,
    rung: Arc<[AtomicBool]>,
}

impl DoorbellHandle {
    /// A doorbell for `vcpus` vCPUs.
    pub fn new(vcpus: usize) -> Self {
        let rung: Arc<[AtomicBool]> = (0..vcpus).map(|_| AtomicBool::new(false)).collect();
        let device = Doorbell::new(vcpus, rung.clone());
        DoorbellHandle {
            device: Arc::new(Mutex::new(device)),
            rung,
        }
    }

    /// The device, for the port bus.
    pub fn device(&self) -> Arc<Mutex<Doorbell>> {
        self.device.clone()
    }

    /// The ring vCPU `v` made during its last exit, if any. Lock-free when it did not ring.
    pub fn take_pending(&self, v: usize) -> Option<u64> {
        if !self.rung.get(v)?.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.lock().take_pending(v)
    }

    /// Records the status of vCPU `v`'s last ring.
    pub fn set_status(&self, v: usize, status: u32) {
        self.lock().set_status(v, status);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Doorbell> {
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Doorbell {
    /// A doorbell for `vcpus` vCPUs that raises `rung[v]` when vCPU `v` rings.
    fn new(vcpus: usize, rung: Arc<[AtomicBool]>) -> Self {
        Doorbell {
            lanes: vec![Lane::default(); vcpus],
            rung,
        }
    }

    /// The ring vCPU `v` made during its last exit, if any.
    pub fn take_pending(&mut self, v: usize) -> Option<u64> {
        self.lanes.get_mut(v).and_then(|l| l.pending.take())
    }

    /// Records the status of vCPU `v`'s last ring.
    pub fn set_status(&mut self, v: usize, status: u32) {
        if let Some(l) = self.lanes.get_mut(v) {
            l.last_status = status;
        }
    }
}

fn dword(data: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(data.try_into().ok()?))
}

impl BusDevice for Doorbell {
    fn read(&mut self, offset: u64, data: &mut [u8], origin: &Origin) {
        let value = match (offset, data.len()) {
            (o, 4) if o == u64::from(DOORBELL_RING) => Some(DOORBELL_MAGIC),
            (o, 4) if o == u64::from(DOORBELL_HIGH) => {
                self.lanes.get(origin.vcpu).map(|l| l.last_status)
            }
            _ => None,
        };
        match value {
            Some(v) => data.copy_from_slice(&v.to_le_bytes()),
            None => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8], origin: &Origin) {
        let (Some(value), Some(lane)) = (dword(data), self.lanes.get_mut(origin.vcpu)) else {
            return; // only 32-bit accesses are defined; others are ignored
        };
        if offset == u64::from(DOORBELL_HIGH) {
            lane.high = value;
        } else if offset == u64::from(DOORBELL_RING) {
            lane.pending = Some((u64::from(lane.high) << 32) | u64::from(value));
            lane.high = 0;
            if let Some(flag) = self.rung.get(origin.vcpu) {
                flag.store(true, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(vcpu: usize) -> Origin {
        Origin { vcpu }
    }

    fn doorbell(n: usize) -> Doorbell {
        Doorbell::new(n, (0..n).map(|_| AtomicBool::new(false)).collect())
    }

    #[test]
    fn ring_combines_the_latched_high_dword_per_vcpu() {
        let mut d = doorbell(2);
        d.write(4, &1u32.to_le_bytes(), &o(0));
        d.write(4, &7u32.to_le_bytes(), &o(1));
        d.write(0, &0x2000u32.to_le_bytes(), &o(0));
        assert_eq!(d.take_pending(0), Some(0x1_0000_2000));
        assert_eq!(d.take_pending(0), None);
        // The latch resets after a ring.
        d.write(0, &0x3000u32.to_le_bytes(), &o(0));
        assert_eq!(d.take_pending(0), Some(0x3000));
        d.write(0, &0x4000u32.to_le_bytes(), &o(1));
        assert_eq!(d.take_pending(1), Some(0x7_0000_4000));
    }

    #[test]
    fn reads_give_magic_and_last_status() {
        let mut d = doorbell(1);
        let mut b = [0u8; 4];
        d.read(0, &mut b, &o(0));
        assert_eq!(u32::from_le_bytes(b), DOORBELL_MAGIC);
        d.set_status(0, 0xc000_0022);
        d.read(4, &mut b, &o(0));
        assert_eq!(u32::from_le_bytes(b), 0xc000_0022);
        let mut small = [0u8; 1];
        d.read(0, &mut small, &o(0));
        assert_eq!(small, [0xff]);
    }

    #[test]
    fn the_handle_sees_only_real_rings() {
        let h = DoorbellHandle::new(2);
        assert_eq!(h.take_pending(0), None);
        h.device()
            .lock()
            .unwrap()
            .write(0, &0x8000u32.to_le_bytes(), &o(1));
        assert_eq!(h.take_pending(0), None);
        assert_eq!(h.take_pending(1), Some(0x8000));
        assert_eq!(h.take_pending(1), None);
        assert_eq!(h.take_pending(7), None);
    }

    #[test]
    fn narrow_writes_and_unknown_vcpus_are_ignored() {
        let mut d = doorbell(1);
        d.write(0, &[1, 2], &o(0));
        d.write(0, &1u32.to_le_bytes(), &o(5));
        assert_eq!(d.take_pending(0), None);
        assert_eq!(d.take_pending(5), None);
    }
}
