//! The PCI root: bus 0's functions, configuration access through ports 0xCF8/0xCFC
//! (mechanism #1) and through ECAM, and the mapping of programmed BARs onto the buses.
//!
//! After every configuration write the function's decoded BARs (enabled in its command
//! register, placed, not being sized) are compared with what is on the buses, and ranges
//! are detached and attached to match: BAR relocation, enabling and disabling decode are
//! all the same operation. A BAR the guest places over another device stays unmapped (and is
//! logged); the guest sees all ones there, as on hardware with a conflict.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use super::config::{BarKind, BarRegion};
use super::host_bridge::HostBridge;
use super::{devfn, PciDevice};
use crate::bus::{Bus, BusDevice, BusError, Origin};
use crate::stop::{GuestStop, StopRequest};

/// CONFIG_ADDRESS; CONFIG_DATA is at +4. The device spans 0xCF8-0xCFF.
pub const CONFIG_ADDRESS_PORT: u64 = 0xcf8;
/// Ports the configuration mechanism occupies (0xCF9 is the PIIX reset control register).
pub const CONFIG_PORTS: u64 = 8;
/// First slot the VMM gives to devices: 0 is the host bridge, 1 is kept for the ISA bridge
/// (PIIX3/PIIX4 sit at 00:01 on QEMU's i440FX machine, where firmware looks for them).
pub const FIRST_DEVICE_SLOT: u8 = 2;
/// The slot reserved for the ISA/power-management bridge.
pub const ISA_BRIDGE_SLOT: u8 = 1;
const SLOTS: u8 = 32;
const CONFIG_ENABLE: u32 = 1 << 31;
const RESET_CONTROL_OFFSET: u64 = 1;
const RESET_CPU: u8 = 1 << 2;

/// Errors building the PCI topology.
#[derive(Debug, thiserror::Error)]
pub enum PciError {
    /// Every slot of bus 0 is taken.
    #[error("no free PCI slot on bus 0")]
    NoFreeSlot,
    /// The device/function number is taken.
    #[error("PCI function {0:02x}.{1} is already in use")]
    InUse(u8, u8),
    /// The VMM's BAR window is exhausted.
    #[error("{0}: no room for its BARs in the PCI window")]
    NoBarSpace(&'static str),
    /// A bus refused a range.
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// Where the root sits in the guest's address spaces: the machine's memory map decides, the
/// root only uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciWindows {
    /// ECAM (MMCONFIG) on the MMIO bus: its first address.
    pub ecam_start: u64,
    /// Its size: 1 MiB per bus.
    pub ecam_size: u64,
    /// The window the root assigns 32-bit memory BARs from: its first address.
    pub mmio32_start: u64,
    /// Its end (exclusive).
    pub mmio32_end: u64,
    /// The window the root assigns I/O BARs from: its first port.
    pub io_start: u64,
    /// Its end (exclusive).
    pub io_end: u64,
}

struct Function {
    name: &'static str,
    device: Arc<Mutex<dyn PciDevice>>,
    mapped: Vec<BarRegion>,
}

struct RootState {
    functions: BTreeMap<u8, Function>,
    pio: Weak<Bus>,
    mmio: Weak<Bus>,
    next_mem: u64,
    next_io: u64,
    windows: PciWindows,
}

/// Bus 0 and the functions on it.
pub struct PciRoot {
    state: Mutex<RootState>,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PciRoot {
    /// Creates bus 0 with the host bridge at 00:00.0, and puts the configuration mechanisms
    /// on the buses: ports 0xCF8-0xCFF on `pio` (a reset through 0xCF9 goes to `reset`) and
    /// ECAM at `windows.ecam_start` on `mmio`. BARs are later mapped on the same buses, from
    /// the BAR windows of `windows`.
    pub fn new(
        pio: &Arc<Bus>,
        mmio: &Arc<Bus>,
        windows: PciWindows,
        reset: Option<Arc<dyn StopRequest>>,
    ) -> Result<Arc<PciRoot>, PciError> {
        let root = Arc::new(PciRoot {
            state: Mutex::new(RootState {
                functions: BTreeMap::new(),
                pio: Arc::downgrade(pio),
                mmio: Arc::downgrade(mmio),
                next_mem: windows.mmio32_start,
                next_io: windows.io_start,
                windows,
            }),
        });
        root.add_device(
            0,
            "pci-host-bridge",
            Arc::new(Mutex::new(HostBridge::new())),
        )?;
        pio.attach(
            "pci-config",
            Arc::new(Mutex::new(PciConfigIo::new(root.clone(), reset))),
            CONFIG_ADDRESS_PORT,
            CONFIG_PORTS,
        )?;
        mmio.attach(
            "pci-ecam",
            Arc::new(Mutex::new(PciEcam { root: root.clone() })),
            windows.ecam_start,
            windows.ecam_size,
        )?;
        Ok(root)
    }

    /// The first slot at or above `FIRST_DEVICE_SLOT` with no function 0.
    pub fn free_slot(&self) -> Result<u8, PciError> {
        let state = lock(&self.state);
        (FIRST_DEVICE_SLOT..SLOTS)
            .find(|s| !state.functions.contains_key(&devfn(*s, 0)))
            .ok_or(PciError::NoFreeSlot)
    }

    /// Puts `device` at `devfn` on bus 0. Its BARs get addresses in the VMM's windows (for
    /// guests booted without firmware; firmware reassigns them); decoding stays off until
    /// the guest enables it in the command register. Only before the vCPUs run: it locks the
    /// root before the device, the reverse of the order configuration writes use.
    pub fn add_device(
        &self,
        devfn: u8,
        name: &'static str,
        device: Arc<Mutex<dyn PciDevice>>,
    ) -> Result<(), PciError> {
        let mut state = lock(&self.state);
        if state.functions.contains_key(&devfn) {
            return Err(PciError::InUse(devfn >> 3, devfn & 7));
        }
        let mut dev = lock(&device);
        let bars: Vec<_> = dev.config_space().bars().collect();
        let windows = state.windows;
        for (index, kind, size) in bars {
            let (next, end) = match kind {
                BarKind::Io => (&mut state.next_io, windows.io_end),
                _ => (&mut state.next_mem, windows.mmio32_end),
            };
            let base = next
                .checked_next_multiple_of(size)
                .filter(|b| b.checked_add(size).is_some_and(|e| e <= end))
                .ok_or(PciError::NoBarSpace(name))?;
            *next = base + size;
            dev.config_space_mut()
                .set_bar_address(usize::from(index), base);
        }
        state.functions.insert(
            devfn,
            Function {
                name,
                device: device.clone(),
                mapped: Vec::new(),
            },
        );
        state.sync_bars(devfn, &mut *dev);
        Ok(())
    }

    /// A configuration read of `data.len()` bytes at `offset` of `bus`/`devfn`. Absent
    /// functions read as all ones.
    pub fn config_read(&self, bus: u8, devfn: u8, offset: usize, data: &mut [u8]) {
        let device = {
            let state = lock(&self.state);
            match state.functions.get(&devfn) {
                Some(f) if bus == 0 => f.device.clone(),
                _ => {
                    data.fill(0xff);
                    return;
                }
            }
        };
        lock(&device).read_config(offset, data);
    }

    /// A configuration write, after which the function's BAR mappings follow its registers.
    pub fn config_write(&self, bus: u8, devfn: u8, offset: usize, data: &[u8]) {
        if bus != 0 {
            return;
        }
        // The device handles the write without the root's lock: a virtio device may run a
        // queue (disk I/O) from a write to its PCI-config window, and other vCPUs' config
        // accesses must not wait for that. Lock order: device, then root; so a vCPU waiting
        // for a busy device (the event loop serving its queue) holds no lock others need.
        let device = match lock(&self.state).functions.get(&devfn) {
            Some(f) => f.device.clone(),
            None => return,
        };
        let mut dev = lock(&device);
        dev.write_config(offset, data);
        lock(&self.state).sync_bars(devfn, &mut *dev);
    }

    /// The BARs of `devfn` currently mapped on the buses.
    pub fn mapped_bars(&self, devfn: u8) -> Vec<BarRegion> {
        let state = lock(&self.state);
        state
            .functions
            .get(&devfn)
            .map(|f| f.mapped.clone())
            .unwrap_or_default()
    }
}

impl RootState {
    fn bus(&self, kind: BarKind) -> Option<Arc<Bus>> {
        match kind {
            BarKind::Io => self.pio.upgrade(),
            _ => self.mmio.upgrade(),
        }
    }

    /// Makes the buses match the decoded BARs of the function at `devfn`, which is `dev`
    /// (locked by the caller), and tells it of each change.
    fn sync_bars(&mut self, devfn: u8, dev: &mut dyn PciDevice) {
        let Some(f) = self.functions.get(&devfn) else {
            return;
        };
        let wanted = dev.config_space().decoded_bars();
        if wanted == f.mapped {
            return;
        }
        let (name, device, old) = (f.name, f.device.clone(), f.mapped.clone());
        let mut mapped = Vec::new();
        for region in &old {
            if wanted.contains(region) {
                mapped.push(*region);
            } else if let Some(bus) = self.bus(region.kind) {
                // Only ranges this root attached are in `mapped`.
                let _ = bus.detach(region.base);
                dev.bar_unmapped(region);
            }
        }
        for region in wanted.iter().filter(|r| !old.contains(r)) {
            let Some(bus) = self.bus(region.kind) else {
                continue;
            };
            let handle = BarHandle {
                device: device.clone(),
                bar: region.index,
            };
            match bus.attach(name, Arc::new(Mutex::new(handle)), region.base, region.size) {
                Ok(()) => {
                    dev.bar_mapped(region);
                    mapped.push(*region);
                }
                Err(e) => log::warn!(
                    "{name}: BAR {} at {:#x} not mapped: {e}",
                    region.index,
                    region.base
                ),
            }
        }
        if let Some(f) = self.functions.get_mut(&devfn) {
            f.mapped = mapped;
        }
    }
}

/// Forwards the accesses to one BAR's range to its device.
struct BarHandle {
    device: Arc<Mutex<dyn PciDevice>>,
    bar: u8,
}

impl BusDevice for BarHandle {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        lock(&self.device).read_bar(self.bar, offset, data);
    }
    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        lock(&self.device).write_bar(self.bar, offset, data);
    }
}

/// Configuration mechanism #1: CONFIG_ADDRESS at 0xCF8 (32-bit accesses only), CONFIG_DATA
/// at 0xCFC-0xCFF (any width), and the PIIX reset control register at 0xCF9 (bytes).
pub struct PciConfigIo {
    root: Arc<PciRoot>,
    address: u32,
    reset_control: u8,
    reset: Option<Arc<dyn StopRequest>>,
}

impl PciConfigIo {
    fn new(root: Arc<PciRoot>, reset: Option<Arc<dyn StopRequest>>) -> Self {
        PciConfigIo {
            root,
            address: 0,
            reset_control: 0,
            reset,
        }
    }

    /// The bus, devfn and register offset CONFIG_ADDRESS selects for data port byte `byte`.
    fn target(&self, byte: u64) -> Option<(u8, u8, usize)> {
        if self.address & CONFIG_ENABLE == 0 {
            return None;
        }
        let [reg, devfn, bus, _] = self.address.to_le_bytes();
        Some((
            bus,
            devfn,
            usize::from(reg & 0xfc) + usize::try_from(byte).ok()?,
        ))
    }
}

impl BusDevice for PciConfigIo {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        match (offset, data.len()) {
            (0, 4) => data.copy_from_slice(&self.address.to_le_bytes()),
            (RESET_CONTROL_OFFSET, 1) => data[0] = self.reset_control,
            (4..=7, _) => match self.target(offset - 4) {
                Some((bus, devfn, reg)) => self.root.config_read(bus, devfn, reg, data),
                None => data.fill(0xff),
            },
            _ => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        match (offset, data.len()) {
            (0, 4) => {
                let mut b = [0; 4];
                b.copy_from_slice(data);
                self.address = u32::from_le_bytes(b) & 0x80ff_fffc;
            }
            (RESET_CONTROL_OFFSET, 1) => {
                self.reset_control = data[0] & 0x0e;
                if data[0] & RESET_CPU != 0 {
                    if let Some(stop) = &self.reset {
                        stop.request_stop(GuestStop::Reset);
                    }
                }
            }
            (4..=7, _) => {
                if let Some((bus, devfn, reg)) = self.target(offset - 4) {
                    self.root.config_write(bus, devfn, reg, data);
                }
            }
            _ => {}
        }
    }
}

/// ECAM: bus << 20 | devfn << 12 | register, for buses 0-255 (only bus 0 has functions).
struct PciEcam {
    root: Arc<PciRoot>,
}

fn ecam_target(offset: u64) -> (u8, u8, usize) {
    let bus = u8::try_from((offset >> 20) & 0xff).unwrap_or(u8::MAX);
    let devfn = u8::try_from((offset >> 12) & 0xff).unwrap_or(u8::MAX);
    let reg = usize::try_from(offset & 0xfff).unwrap_or(0);
    (bus, devfn, reg)
}

impl BusDevice for PciEcam {
    fn read(&mut self, offset: u64, data: &mut [u8], _origin: &Origin) {
        let (bus, devfn, reg) = ecam_target(offset);
        // An access must stay inside one function's 4 KiB.
        if reg + data.len() > 0x1000 {
            data.fill(0xff);
            return;
        }
        self.root.config_read(bus, devfn, reg, data);
    }

    fn write(&mut self, offset: u64, data: &[u8], _origin: &Origin) {
        let (bus, devfn, reg) = ecam_target(offset);
        if reg + data.len() <= 0x1000 {
            self.root.config_write(bus, devfn, reg, data);
        }
    }
}

#[cfg(test)]
mod tests;
