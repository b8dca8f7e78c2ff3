//! An address-range bus: port I/O and MMIO accesses are routed to the device whose range
//! covers the address. Accesses nobody claims read as all ones and are logged once per address.
//!
//! Devices are inserted while the VM is built (`insert`), and PCI BARs are attached, moved and
//! detached while it runs (`attach`, `detach`), when the guest programs them. An access looks
//! the device up under a read lock and calls it after releasing the lock, so a device may move
//! itself (or another device) on the bus from inside its own `write`.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

/// Who made an access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// vCPU index.
    pub vcpu: usize,
}

/// A device that answers reads and writes on a bus. `offset` is relative to the start of the
/// range the device was inserted at; `origin` says which vCPU accessed it.
pub trait BusDevice: Send {
    /// Fills `data` for a read at `offset`.
    fn read(&mut self, offset: u64, data: &mut [u8], origin: &Origin);
    /// Handles a write of `data` at `offset`.
    fn write(&mut self, offset: u64, data: &[u8], origin: &Origin);
}

/// Errors building a bus.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    /// The new range overlaps an existing one.
    #[error("{name}: range {base:#x}+{len:#x} overlaps an existing device")]
    Overlap {
        /// The device being inserted.
        name: &'static str,
        /// Its base.
        base: u64,
        /// Its length.
        len: u64,
    },
    /// An empty or wrapping range.
    #[error("{0}: empty or wrapping range")]
    BadRange(&'static str),
    /// No device starts at this address.
    #[error("no device at {0:#x}")]
    NotFound(u64),
}

#[derive(Clone)]
struct Entry {
    len: u64,
    name: &'static str,
    device: Arc<Mutex<dyn BusDevice>>,
}

/// Distinct unclaimed addresses logged per bus before the log goes quiet.
const MAX_LOGGED_ADDRESSES: usize = 256;

/// What happened to an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A device handled it.
    Handled,
    /// Nobody claims the address; a read returned all ones.
    Unclaimed,
}

/// A bus of devices keyed by their base address.
pub struct Bus {
    kind: &'static str,
    devices: RwLock<BTreeMap<u64, Entry>>,
    logged: Mutex<HashSet<u64>>,
}

impl Bus {
    /// An empty bus; `kind` ("port" or "MMIO") names it in logs.
    pub fn new(kind: &'static str) -> Self {
        Bus {
            kind,
            devices: RwLock::new(BTreeMap::new()),
            logged: Mutex::new(HashSet::new()),
        }
    }

    /// Puts `device` at `[base, base + len)` while the VM is built.
    pub fn insert(
        &mut self,
        name: &'static str,
        device: Arc<Mutex<dyn BusDevice>>,
        base: u64,
        len: u64,
    ) -> Result<(), BusError> {
        self.attach(name, device, base, len)
    }

    /// Puts `device` at `[base, base + len)` on a bus that may be in use.
    pub fn attach(
        &self,
        name: &'static str,
        device: Arc<Mutex<dyn BusDevice>>,
        base: u64,
        len: u64,
    ) -> Result<(), BusError> {
        let mut devices = self.devices.write().unwrap_or_else(|e| e.into_inner());
        Self::check_free(&devices, name, base, len)?;
        devices.insert(base, Entry { len, name, device });
        Ok(())
    }

    fn check_free(
        devices: &BTreeMap<u64, Entry>,
        name: &'static str,
        base: u64,
        len: u64,
    ) -> Result<(), BusError> {
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(BusError::BadRange(name))?;
        let overlaps_prev = devices
            .range(..=base)
            .next_back()
            .is_some_and(|(b, e)| b + e.len > base);
        let overlaps_next = devices.range(base..end).next().is_some();
        if overlaps_prev || overlaps_next {
            return Err(BusError::Overlap { name, base, len });
        }
        Ok(())
    }

    /// Removes the device that starts at `base` and returns it.
    pub fn detach(&self, base: u64) -> Result<Arc<Mutex<dyn BusDevice>>, BusError> {
        let mut devices = self.devices.write().unwrap_or_else(|e| e.into_inner());
        devices
            .remove(&base)
            .map(|e| e.device)
            .ok_or(BusError::NotFound(base))
    }

    /// Moves the device that starts at `old` to start at `new`, keeping its length. On an
    /// error the device stays where it was.
    pub fn relocate(&self, old: u64, new: u64) -> Result<(), BusError> {
        let mut devices = self.devices.write().unwrap_or_else(|e| e.into_inner());
        let entry = devices.remove(&old).ok_or(BusError::NotFound(old))?;
        if let Err(e) = Self::check_free(&devices, entry.name, new, entry.len) {
            devices.insert(old, entry);
            return Err(e);
        }
        devices.insert(new, entry);
        Ok(())
    }

    fn find(&self, addr: u64, size: usize) -> Option<(u64, Arc<Mutex<dyn BusDevice>>)> {
        let devices = self.devices.read().unwrap_or_else(|e| e.into_inner());
        let (base, entry) = devices.range(..=addr).next_back()?;
        let end = addr.checked_add(size as u64)?;
        (end <= base + entry.len).then(|| (addr - base, entry.device.clone()))
    }

    /// Routes a read.
    pub fn read(&self, addr: u64, data: &mut [u8], origin: &Origin) -> Access {
        match self.find(addr, data.len()) {
            Some((offset, device)) => {
                device
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .read(offset, data, origin);
                Access::Handled
            }
            None => {
                data.fill(0xff);
                self.log_unclaimed("read", addr, data.len());
                Access::Unclaimed
            }
        }
    }

    /// Routes a write.
    pub fn write(&self, addr: u64, data: &[u8], origin: &Origin) -> Access {
        match self.find(addr, data.len()) {
            Some((offset, device)) => {
                device
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .write(offset, data, origin);
                Access::Handled
            }
            None => {
                self.log_unclaimed("write", addr, data.len());
                Access::Unclaimed
            }
        }
    }

    fn log_unclaimed(&self, what: &str, addr: u64, size: usize) {
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        // A guest scanning the address space must not grow this set without bound.
        if logged.len() > MAX_LOGGED_ADDRESSES {
            return;
        }
        if logged.len() == MAX_LOGGED_ADDRESSES {
            logged.insert(u64::MAX);
            log::info!(
                "unclaimed {} accesses at {MAX_LOGGED_ADDRESSES} addresses; no more are logged",
                self.kind
            );
        } else if logged.insert(addr) {
            log::info!(
                "unclaimed {} {what} at {addr:#x} ({size} bytes); further ones not logged",
                self.kind
            );
        }
    }

    /// The names and ranges of the devices, in address order.
    pub fn devices(&self) -> Vec<(&'static str, u64, u64)> {
        let devices = self.devices.read().unwrap_or_else(|e| e.into_inner());
        devices.iter().map(|(b, e)| (e.name, *b, e.len)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo(Vec<(u64, Vec<u8>)>);
    impl BusDevice for Echo {
        fn read(&mut self, offset: u64, data: &mut [u8], _: &Origin) {
            data.fill(u8::try_from(offset).unwrap());
        }
        fn write(&mut self, offset: u64, data: &[u8], _: &Origin) {
            self.0.push((offset, data.to_vec()));
        }
    }

    #[test]
    fn accesses_reach_the_device_with_offsets() {
        let dev = Arc::new(Mutex::new(Echo(Vec::new())));
        let mut bus = Bus::new("port");
        bus.insert("echo", dev.clone(), 0x3f8, 8).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(bus.read(0x3fa, &mut b, &Origin::default()), Access::Handled);
        assert_eq!(b, [2]);
        assert_eq!(bus.write(0x3ff, &[7], &Origin::default()), Access::Handled);
        assert_eq!(dev.lock().unwrap().0, vec![(7, vec![7])]);
    }

    /// Regression: every distinct unclaimed address used to be remembered, so a guest scanning
    /// the MMIO hole could grow the set without bound.
    #[test]
    fn unclaimed_log_is_bounded() {
        let bus = Bus::new("MMIO");
        let mut b = [0u8; 4];
        for i in 0..10_000u64 {
            bus.read(0xd000_0000 + i * 4, &mut b, &Origin::default());
        }
        assert_eq!(bus.logged.lock().unwrap().len(), MAX_LOGGED_ADDRESSES + 1);
    }

    #[test]
    fn unclaimed_reads_are_all_ones() {
        let bus = Bus::new("port");
        let mut b = [0u8; 2];
        assert_eq!(
            bus.read(0x80, &mut b, &Origin::default()),
            Access::Unclaimed
        );
        assert_eq!(b, [0xff, 0xff]);
    }

    #[test]
    fn access_straddling_the_end_is_unclaimed() {
        let mut bus = Bus::new("port");
        bus.insert("echo", Arc::new(Mutex::new(Echo(Vec::new()))), 0x10, 2)
            .unwrap();
        let mut b = [0u8; 4];
        assert_eq!(
            bus.read(0x10, &mut b, &Origin::default()),
            Access::Unclaimed
        );
    }

    #[test]
    fn overlapping_ranges_are_refused() {
        let mut bus = Bus::new("port");
        let d = || Arc::new(Mutex::new(Echo(Vec::new())));
        bus.insert("a", d(), 0x10, 0x10).unwrap();
        assert!(bus.insert("b", d(), 0x18, 0x10).is_err());
        assert!(bus.insert("c", d(), 0x08, 0x09).is_err());
        assert!(bus.insert("d", d(), 0x20, 0x10).is_ok());
        assert_eq!(bus.insert("e", d(), 0x40, 0), Err(BusError::BadRange("e")));
    }

    #[test]
    fn attach_detach_and_relocate_move_the_range() {
        let dev = Arc::new(Mutex::new(Echo(Vec::new())));
        let bus = Bus::new("MMIO");
        bus.attach("bar", dev.clone(), 0x1000, 0x100).unwrap();
        bus.attach("other", dev.clone(), 0x3000, 0x100).unwrap();
        let o = Origin::default();
        assert_eq!(bus.write(0x1010, &[1], &o), Access::Handled);
        bus.relocate(0x1000, 0x2000).unwrap();
        assert_eq!(bus.write(0x1010, &[2], &o), Access::Unclaimed);
        assert_eq!(bus.write(0x2010, &[3], &o), Access::Handled);
        // A move onto another device is refused and leaves the device in place.
        assert!(matches!(
            bus.relocate(0x2000, 0x2f80),
            Err(BusError::Overlap { .. })
        ));
        assert_eq!(bus.write(0x2020, &[4], &o), Access::Handled);
        assert_eq!(
            bus.relocate(0x5000, 0x6000),
            Err(BusError::NotFound(0x5000))
        );
        bus.detach(0x2000).unwrap();
        assert_eq!(bus.write(0x2010, &[5], &o), Access::Unclaimed);
        assert!(bus.detach(0x2000).is_err());
        assert_eq!(
            dev.lock().unwrap().0,
            vec![(0x10, vec![1]), (0x10, vec![3]), (0x20, vec![4])]
        );
        assert_eq!(bus.devices(), vec![("other", 0x3000, 0x100)]);
    }

    /// A device that detaches itself from inside its own write: the bus must not hold its
    /// lock while calling the device.
    #[test]
    fn device_can_move_itself_during_an_access() {
        struct Mover(Arc<Bus>);
        impl BusDevice for Mover {
            fn read(&mut self, _: u64, _: &mut [u8], _: &Origin) {}
            fn write(&mut self, _: u64, _: &[u8], _: &Origin) {
                self.0.relocate(0x10, 0x20).unwrap();
            }
        }
        let bus = Arc::new(Bus::new("port"));
        bus.attach("mover", Arc::new(Mutex::new(Mover(bus.clone()))), 0x10, 1)
            .unwrap();
        assert_eq!(bus.write(0x10, &[0], &Origin::default()), Access::Handled);
        assert_eq!(bus.devices(), vec![("mover", 0x20, 1)]);
        // Break the cycle so the test does not leak.
        bus.detach(0x20).unwrap();
    }
}
