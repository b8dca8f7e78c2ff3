//! A type-0 PCI configuration space: 256 bytes of registers with per-bit write masks, BARs
//! that size themselves the standard way (write all ones, read back the size mask), a
//! capability list, and the interrupt line/pin registers.
//!
//! The BARs are plain registers with write masks, so sizing needs no special case: the
//! address bits below the BAR's size and the type bits are read-only. What the guest
//! programmed is decoded by [`ConfigSpace::decoded_bars`], which the PCI root compares with
//! what it has mapped on the buses after every configuration write.

/// Size of the conventional configuration space.
pub const CONFIG_SIZE: usize = 256;
/// Vendor ID register.
pub const VENDOR_ID: usize = 0x00;
/// Command register.
pub const COMMAND: usize = 0x04;
/// Status register.
pub const STATUS: usize = 0x06;
/// First BAR.
pub const BAR0: usize = 0x10;
/// Capability pointer.
pub const CAPABILITY_POINTER: usize = 0x34;
/// Interrupt line (written by firmware, read by the OS).
pub const INTERRUPT_LINE: usize = 0x3c;
/// Interrupt pin (1 = INTA#).
pub const INTERRUPT_PIN: usize = 0x3d;
/// Where capabilities start.
pub const CAPABILITIES_START: usize = 0x40;

/// Command: respond to I/O space accesses.
pub const COMMAND_IO: u16 = 1 << 0;
/// Command: respond to memory space accesses.
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// Command: may master the bus (DMA).
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Command: INTx emulation disabled.
pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// The command bits a guest may set.
const COMMAND_WRITABLE: u16 =
    COMMAND_IO | COMMAND_MEMORY | COMMAND_BUS_MASTER | (1 << 6) | (1 << 8) | COMMAND_INTX_DISABLE;
/// Status: the capability list is valid.
const STATUS_CAPABILITIES: u16 = 1 << 4;

/// Number of BARs in a type-0 header.
pub const BAR_COUNT: usize = 6;

/// What a BAR decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarKind {
    /// I/O ports (16-bit on x86).
    Io,
    /// 32-bit memory.
    Memory32 {
        /// Prefetchable.
        prefetchable: bool,
    },
    /// 64-bit memory; the next BAR holds the upper half.
    Memory64 {
        /// Prefetchable.
        prefetchable: bool,
    },
}

/// A BAR the guest has placed and enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarRegion {
    /// The BAR's index (0-5; the lower index of a 64-bit pair).
    pub index: u8,
    /// I/O or memory.
    pub kind: BarKind,
    /// Guest address (port number for I/O).
    pub base: u64,
    /// Size in bytes (a power of two).
    pub size: u64,
}

/// Errors defining a device's configuration space (programming errors of the VMM).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigSpaceError {
    /// A BAR size that is not a power of two, too small for its kind, or too large.
    #[error("BAR {index}: bad size {size:#x}")]
    BarSize {
        /// BAR index.
        index: usize,
        /// Requested size.
        size: u64,
    },
    /// The BAR (or the upper half of a 64-bit BAR) is already in use or out of range.
    #[error("BAR {0} is in use or out of range")]
    BarInUse(usize),
    /// No room left for a capability.
    #[error("no room for a {0}-byte capability")]
    CapabilitySpace(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BarSlot {
    Unused,
    Bar { kind: BarKind, size: u64 },
    Upper,
}

/// The configuration space of one PCI function.
#[derive(Clone)]
pub struct ConfigSpace {
    data: [u8; CONFIG_SIZE],
    write_mask: [u8; CONFIG_SIZE],
    bars: [BarSlot; BAR_COUNT],
    last_capability: Option<usize>,
    next_capability: usize,
}

/// Identity of a PCI function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PciIds {
    /// Vendor ID.
    pub vendor: u16,
    /// Device ID.
    pub device: u16,
    /// Revision.
    pub revision: u8,
    /// Class code, subclass and programming interface (class << 16 | sub << 8 | prog_if).
    pub class: u32,
    /// Subsystem vendor ID.
    pub subsystem_vendor: u16,
    /// Subsystem ID.
    pub subsystem: u16,
}

impl ConfigSpace {
    /// A header-type-0 function with the given identity and no BARs or capabilities.
    pub fn new(ids: PciIds) -> Self {
        let mut c = ConfigSpace {
            data: [0; CONFIG_SIZE],
            write_mask: [0; CONFIG_SIZE],
            bars: [BarSlot::Unused; BAR_COUNT],
            last_capability: None,
            next_capability: CAPABILITIES_START,
        };
        c.set_u16(VENDOR_ID, ids.vendor);
        c.set_u16(0x02, ids.device);
        c.data[0x08] = ids.revision;
        c.data[0x09..0x0c].copy_from_slice(&ids.class.to_le_bytes()[..3]);
        c.set_u16(0x2c, ids.subsystem_vendor);
        c.set_u16(0x2e, ids.subsystem);
        c.write_mask[COMMAND..COMMAND + 2].copy_from_slice(&COMMAND_WRITABLE.to_le_bytes());
        // Cache line size and latency timer are plain storage; so is the interrupt line.
        c.write_mask[0x0c] = 0xff;
        c.write_mask[0x0d] = 0xff;
        c.write_mask[INTERRUPT_LINE] = 0xff;
        c.data[INTERRUPT_LINE] = 0xff;
        c
    }

    /// Makes `[offset, offset + len)` plain read-write storage (chipset registers such as the
    /// host bridge's PAM bytes, which firmware writes and reads back).
    pub fn set_writable(&mut self, offset: usize, len: usize) {
        let end = (offset + len).min(CONFIG_SIZE);
        self.write_mask[offset.min(end)..end].fill(0xff);
    }

    /// Sets the write mask of the byte at `offset`: the bits of `mask` become writable, the
    /// others read-only.
    pub fn set_write_mask(&mut self, offset: usize, mask: u8) {
        if let Some(m) = self.write_mask.get_mut(offset) {
            *m = mask;
        }
    }

    /// Sets the interrupt pin (1 = INTA#) and the line the VMM routes it to.
    pub fn set_interrupt(&mut self, pin: u8, line: u8) {
        self.data[INTERRUPT_PIN] = pin;
        self.data[INTERRUPT_LINE] = line;
    }

    /// Defines BAR `index` of `size` bytes (a power of two: at least 16 for memory, 4 for
    /// I/O). A 64-bit BAR also takes `index + 1`.
    pub fn add_bar(
        &mut self,
        index: usize,
        kind: BarKind,
        size: u64,
    ) -> Result<(), ConfigSpaceError> {
        let (min, max) = match kind {
            BarKind::Io => (4, 1 << 16),
            BarKind::Memory32 { .. } => (16, 1 << 31),
            BarKind::Memory64 { .. } => (16, 1 << 63),
        };
        if !size.is_power_of_two() || size < min || size > max {
            return Err(ConfigSpaceError::BarSize { index, size });
        }
        let wide = matches!(kind, BarKind::Memory64 { .. });
        let last = index + usize::from(wide);
        if last >= BAR_COUNT
            || self.bars[index..=last]
                .iter()
                .any(|b| *b != BarSlot::Unused)
        {
            return Err(ConfigSpaceError::BarInUse(index));
        }
        let offset = BAR0 + 4 * index;
        let mask = !(size - 1);
        let (flags, low_mask): (u32, u32) = match kind {
            BarKind::Io => (0x1, low32(mask) & 0xffff & !0x3),
            BarKind::Memory32 { prefetchable } => {
                (u32::from(prefetchable) << 3, low32(mask) & !0xf)
            }
            BarKind::Memory64 { prefetchable } => {
                (0x4 | (u32::from(prefetchable) << 3), low32(mask) & !0xf)
            }
        };
        self.set_u32(offset, flags);
        self.write_mask[offset..offset + 4].copy_from_slice(&low_mask.to_le_bytes());
        self.bars[index] = BarSlot::Bar { kind, size };
        if wide {
            let high_mask = low32(mask >> 32);
            self.write_mask[offset + 4..offset + 8].copy_from_slice(&high_mask.to_le_bytes());
            self.bars[index + 1] = BarSlot::Upper;
        }
        Ok(())
    }

    /// Programs BAR `index` as firmware would (the VMM pre-assigns BARs for direct kernel
    /// boot). Bits below the BAR's size are dropped.
    pub fn set_bar_address(&mut self, index: usize, address: u64) {
        let offset = BAR0 + 4 * index;
        self.write(offset, &low32(address).to_le_bytes());
        if let Some(BarSlot::Upper) = self.bars.get(index + 1) {
            self.write(offset + 4, &low32(address >> 32).to_le_bytes());
        }
    }

    /// Appends a capability. `body` starts with the capability ID; its second byte (the
    /// next pointer) is filled in here. Returns the capability's offset.
    pub fn add_capability(&mut self, body: &[u8]) -> Result<usize, ConfigSpaceError> {
        let offset = self.next_capability;
        let end = offset + body.len();
        if body.len() < 2 || end > CONFIG_SIZE {
            return Err(ConfigSpaceError::CapabilitySpace(body.len()));
        }
        self.data[offset..end].copy_from_slice(body);
        self.data[offset + 1] = 0;
        let link = self.last_capability.map_or(CAPABILITY_POINTER, |c| c + 1);
        self.data[link] = u8::try_from(offset).unwrap_or(0);
        self.last_capability = Some(offset);
        self.next_capability = (end + 3) & !3;
        let status = self.u16_at(STATUS) | STATUS_CAPABILITIES;
        self.set_u16(STATUS, status);
        Ok(offset)
    }

    /// Reads `data.len()` bytes at `offset`; bytes past the end read as zero.
    pub fn read(&self, offset: usize, data: &mut [u8]) {
        crate::bytes::read_padded(&self.data, offset as u64, data);
    }

    /// Writes `data` at `offset` through the write masks; bytes past the end are dropped.
    pub fn write(&mut self, offset: usize, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            let Some(at) = offset.checked_add(i).filter(|a| *a < CONFIG_SIZE) else {
                break;
            };
            let mask = self.write_mask[at];
            self.data[at] = (self.data[at] & !mask) | (b & mask);
        }
    }

    /// The 16-bit register at `offset`.
    pub fn u16_at(&self, offset: usize) -> u16 {
        u16::from_le_bytes([self.data[offset], self.data[offset + 1]])
    }

    /// The 32-bit register at `offset`.
    pub fn u32_at(&self, offset: usize) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.data[offset..offset + 4]);
        u32::from_le_bytes(b)
    }

    fn set_u16(&mut self, offset: usize, v: u16) {
        self.data[offset..offset + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn set_u32(&mut self, offset: usize, v: u32) {
        self.data[offset..offset + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        self.u16_at(COMMAND)
    }

    /// The defined BARs: index, kind and size.
    pub fn bars(&self) -> impl Iterator<Item = (u8, BarKind, u64)> + '_ {
        self.bars.iter().enumerate().filter_map(|(i, b)| match b {
            BarSlot::Bar { kind, size } => Some((u8::try_from(i).ok()?, *kind, *size)),
            _ => None,
        })
    }

    /// The BARs the guest has enabled (command register) and placed. A BAR whose address
    /// bits are all ones is being sized, and one at address 0 is unassigned: neither decodes.
    pub fn decoded_bars(&self) -> Vec<BarRegion> {
        let command = self.command();
        self.bars()
            .filter_map(|(index, kind, size)| {
                let offset = BAR0 + 4 * usize::from(index);
                let low = u64::from(self.u32_at(offset));
                let (enabled, base, all_ones) = match kind {
                    BarKind::Io => {
                        let base = low & !0x3;
                        (
                            command & COMMAND_IO != 0,
                            base,
                            base == (!(size - 1) & 0xffff),
                        )
                    }
                    BarKind::Memory32 { .. } => {
                        let base = low & !0xf;
                        (
                            command & COMMAND_MEMORY != 0,
                            base,
                            base == (!(size - 1) & 0xffff_ffff),
                        )
                    }
                    BarKind::Memory64 { .. } => {
                        let high = u64::from(self.u32_at(offset + 4));
                        let base = (high << 32) | (low & !0xf);
                        (command & COMMAND_MEMORY != 0, base, base == !(size - 1))
                    }
                };
                (enabled && base != 0 && !all_ones).then_some(BarRegion {
                    index,
                    kind,
                    base,
                    size,
                })
            })
            .collect()
    }
}

fn low32(v: u64) -> u32 {
    u32::try_from(v & 0xffff_ffff).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> ConfigSpace {
        ConfigSpace::new(PciIds {
            vendor: 0x1af4,
            device: 0x1042,
            revision: 1,
            class: 0x01_00_00,
            subsystem_vendor: 0x1af4,
            subsystem: 0x1100,
        })
    }

    fn read32(c: &ConfigSpace, offset: usize) -> u32 {
        let mut b = [0; 4];
        c.read(offset, &mut b);
        u32::from_le_bytes(b)
    }

    fn write32(c: &mut ConfigSpace, offset: usize, v: u32) {
        c.write(offset, &v.to_le_bytes());
    }

    #[test]
    fn ids_and_read_only_header() {
        let mut c = space();
        assert_eq!(read32(&c, 0), 0x1042_1af4);
        assert_eq!(read32(&c, 8), 0x0100_0001);
        write32(&mut c, 0, 0);
        write32(&mut c, 8, 0);
        assert_eq!(read32(&c, 0), 0x1042_1af4);
        assert_eq!(read32(&c, 8), 0x0100_0001);
        let mut b = [0; 2];
        c.read(0x2c, &mut b);
        assert_eq!(b, [0xf4, 0x1a]);
        // Past the end reads as zero and writes are dropped.
        let mut b = [0xaa; 4];
        c.read(0xfe, &mut b);
        assert_eq!(&b[2..], &[0, 0]);
        c.write(0xff, &[1, 2, 3]);
    }

    #[test]
    fn memory32_bar_sizes_and_decodes() {
        let mut c = space();
        c.add_bar(
            0,
            BarKind::Memory32 {
                prefetchable: false,
            },
            0x1000,
        )
        .unwrap();
        write32(&mut c, BAR0, 0xffff_ffff);
        assert_eq!(read32(&c, BAR0), 0xffff_f000);
        assert!(c.decoded_bars().is_empty(), "not enabled");
        write32(&mut c, BAR0, 0xc000_0123);
        assert_eq!(read32(&c, BAR0), 0xc000_0000);
        assert!(c.decoded_bars().is_empty(), "memory decode off");
        c.write(COMMAND, &COMMAND_MEMORY.to_le_bytes());
        assert_eq!(
            c.decoded_bars(),
            vec![BarRegion {
                index: 0,
                kind: BarKind::Memory32 {
                    prefetchable: false
                },
                base: 0xc000_0000,
                size: 0x1000
            }]
        );
        // Sizing with decode on does not map the BAR at the size mask.
        write32(&mut c, BAR0, 0xffff_ffff);
        assert!(c.decoded_bars().is_empty());
    }

    #[test]
    fn memory64_bar_sizes_both_halves() {
        let mut c = space();
        c.add_bar(2, BarKind::Memory64 { prefetchable: true }, 0x4000)
            .unwrap();
        write32(&mut c, BAR0 + 8, 0xffff_ffff);
        write32(&mut c, BAR0 + 12, 0xffff_ffff);
        assert_eq!(read32(&c, BAR0 + 8), 0xffff_c00c);
        assert_eq!(read32(&c, BAR0 + 12), 0xffff_ffff);
        write32(&mut c, BAR0 + 8, 0xe000_0000);
        write32(&mut c, BAR0 + 12, 0x1);
        c.write(
            COMMAND,
            &(COMMAND_MEMORY | COMMAND_BUS_MASTER).to_le_bytes(),
        );
        let bars = c.decoded_bars();
        assert_eq!(bars.len(), 1);
        assert_eq!(bars[0].base, 0x1_e000_0000);
        assert_eq!(bars[0].index, 2);
        // The upper half is not a BAR of its own.
        assert_eq!(c.bars().count(), 1);
        assert_eq!(
            c.add_bar(3, BarKind::Io, 16),
            Err(ConfigSpaceError::BarInUse(3))
        );
        assert_eq!(
            c.add_bar(
                5,
                BarKind::Memory64 {
                    prefetchable: false
                },
                16
            ),
            Err(ConfigSpaceError::BarInUse(5))
        );
    }

    #[test]
    fn io_bar_sizes_and_decodes() {
        let mut c = space();
        c.add_bar(1, BarKind::Io, 0x20).unwrap();
        write32(&mut c, BAR0 + 4, 0xffff_ffff);
        assert_eq!(read32(&c, BAR0 + 4), 0x0000_ffe1);
        write32(&mut c, BAR0 + 4, 0xc040);
        c.write(COMMAND, &COMMAND_IO.to_le_bytes());
        assert_eq!(c.decoded_bars()[0].base, 0xc040);
        assert_eq!(c.decoded_bars()[0].kind, BarKind::Io);
    }

    #[test]
    fn bad_bar_sizes_are_refused() {
        let mut c = space();
        assert!(c.add_bar(0, BarKind::Io, 3).is_err());
        assert!(c
            .add_bar(
                0,
                BarKind::Memory32 {
                    prefetchable: false
                },
                8
            )
            .is_err());
        assert!(c
            .add_bar(
                0,
                BarKind::Memory32 {
                    prefetchable: false
                },
                0x3000
            )
            .is_err());
        assert!(c.add_bar(6, BarKind::Io, 4).is_err());
    }

    #[test]
    fn capabilities_are_linked_in_order() {
        let mut c = space();
        assert_eq!(c.u16_at(STATUS) & STATUS_CAPABILITIES, 0);
        let a = c.add_capability(&[0x09, 0xaa, 5, 1, 2]).unwrap();
        let b = c.add_capability(&[0x11, 0, 3]).unwrap();
        assert_eq!(a, 0x40);
        assert_eq!(b, 0x48);
        assert_ne!(c.u16_at(STATUS) & STATUS_CAPABILITIES, 0);
        let mut p = [0; 1];
        c.read(CAPABILITY_POINTER, &mut p);
        assert_eq!(p[0], 0x40);
        let mut cap = [0; 5];
        c.read(0x40, &mut cap);
        assert_eq!(cap, [0x09, 0x48, 5, 1, 2]);
        c.read(0x49, &mut p);
        assert_eq!(p[0], 0, "last capability ends the list");
        // Capabilities are read-only.
        c.write(0x42, &[0xff]);
        c.read(0x42, &mut p);
        assert_eq!(p[0], 5);
        assert!(c.add_capability(&[0; 200]).is_err());
    }

    #[test]
    fn interrupt_line_is_writable_and_pin_is_not() {
        let mut c = space();
        c.set_interrupt(1, 10);
        c.write(INTERRUPT_LINE, &[11, 4]);
        let mut b = [0; 2];
        c.read(INTERRUPT_LINE, &mut b);
        assert_eq!(b, [11, 1]);
    }

    #[test]
    fn command_register_keeps_only_defined_bits() {
        let mut c = space();
        c.write(COMMAND, &0xffffu16.to_le_bytes());
        assert_eq!(c.command(), COMMAND_WRITABLE);
    }
}
