//! Tests of the PCI root: configuration access through 0xCF8/0xCFC and ECAM, and BAR mapping.

use super::*;
use crate::bus::Access;
use crate::pci::config::{ConfigSpace, PciIds, COMMAND_IO, COMMAND_MEMORY};
use crate::stop::StopLog;

// The windows of the VMM's memory map (vmm/src/layout.rs).
const PCI_ECAM_START: u64 = 0xe000_0000;
const PCI_MMIO32_START: u64 = 0xc000_0000;
const PCI_IO_START: u64 = 0xc000;
const WINDOWS: PciWindows = PciWindows {
    ecam_start: PCI_ECAM_START,
    ecam_size: 0x1000_0000,
    mmio32_start: PCI_MMIO32_START,
    mmio32_end: PCI_ECAM_START,
    io_start: PCI_IO_START,
    io_end: 0x1_0000,
};

/// A function with a 32-bit memory BAR 0 and an I/O BAR 1 that records BAR accesses.
struct TestDevice {
    config: ConfigSpace,
    accesses: Vec<(u8, u64, Vec<u8>)>,
    /// (mapped, BAR, base) per `bar_mapped`/`bar_unmapped` call.
    hooks: Vec<(bool, u8, u64)>,
}

impl TestDevice {
    fn new() -> Self {
        let mut config = ConfigSpace::new(PciIds {
            vendor: 0x1234,
            device: 0x5678,
            ..Default::default()
        });
        config
            .add_bar(
                0,
                BarKind::Memory32 {
                    prefetchable: false,
                },
                0x1000,
            )
            .unwrap();
        config.add_bar(1, BarKind::Io, 0x10).unwrap();
        TestDevice {
            config,
            accesses: Vec::new(),
            hooks: Vec::new(),
        }
    }
}

impl PciDevice for TestDevice {
    fn config_space(&self) -> &ConfigSpace {
        &self.config
    }
    fn config_space_mut(&mut self) -> &mut ConfigSpace {
        &mut self.config
    }
    fn read_bar(&mut self, bar: u8, _offset: u64, data: &mut [u8]) {
        data.fill(bar + 1);
    }
    fn write_bar(&mut self, bar: u8, offset: u64, data: &[u8]) {
        self.accesses.push((bar, offset, data.to_vec()));
    }
    fn bar_mapped(&mut self, region: &BarRegion) {
        self.hooks.push((true, region.index, region.base));
    }
    fn bar_unmapped(&mut self, region: &BarRegion) {
        self.hooks.push((false, region.index, region.base));
    }
}

struct Fixture {
    pio: Arc<Bus>,
    mmio: Arc<Bus>,
    root: Arc<PciRoot>,
    dev: Arc<Mutex<TestDevice>>,
    stop: Arc<StopLog>,
}

fn fixture() -> Fixture {
    let pio = Arc::new(Bus::new("port"));
    let mmio = Arc::new(Bus::new("MMIO"));
    let stop = Arc::new(StopLog::default());
    let root = PciRoot::new(&pio, &mmio, WINDOWS, Some(stop.clone())).unwrap();
    let dev = Arc::new(Mutex::new(TestDevice::new()));
    let slot = root.free_slot().unwrap();
    assert_eq!(slot, FIRST_DEVICE_SLOT);
    root.add_device(devfn(slot, 0), "test", dev.clone())
        .unwrap();
    Fixture {
        pio,
        mmio,
        root,
        dev,
        stop,
    }
}

const O: Origin = Origin { vcpu: 0 };
const CMD: u8 = 0x04;

fn cf8_address(slot: u8, reg: u8) -> u32 {
    0x8000_0000 | (u32::from(devfn(slot, 0)) << 8) | u32::from(reg)
}

impl Fixture {
    fn cf8_read(&self, slot: u8, reg: u8, width: usize) -> u32 {
        self.pio.write(
            CONFIG_ADDRESS_PORT,
            &cf8_address(slot, reg & 0xfc).to_le_bytes(),
            &O,
        );
        let mut b = [0u8; 4];
        let port = CONFIG_ADDRESS_PORT + 4 + u64::from(reg & 3);
        self.pio.read(port, &mut b[..width], &O);
        u32::from_le_bytes(b)
    }

    fn cf8_write(&self, slot: u8, reg: u8, width: usize, v: u32) {
        self.pio.write(
            CONFIG_ADDRESS_PORT,
            &cf8_address(slot, reg & 0xfc).to_le_bytes(),
            &O,
        );
        let port = CONFIG_ADDRESS_PORT + 4 + u64::from(reg & 3);
        self.pio.write(port, &v.to_le_bytes()[..width], &O);
    }

    fn ecam_read32(&self, slot: u8, reg: u64) -> u32 {
        let mut b = [0u8; 4];
        let addr = PCI_ECAM_START + (u64::from(devfn(slot, 0)) << 12) + reg;
        self.mmio.read(addr, &mut b, &O);
        u32::from_le_bytes(b)
    }
}

#[test]
fn host_bridge_and_device_are_visible_through_cf8() {
    let f = fixture();
    assert_eq!(f.cf8_read(0, 0, 4), 0x1237_8086);
    assert_eq!(f.cf8_read(2, 0, 4), 0x5678_1234);
    // Every width and every offset of the data port.
    assert_eq!(f.cf8_read(2, 0, 2), 0x1234);
    assert_eq!(f.cf8_read(2, 2, 2), 0x5678);
    assert_eq!(f.cf8_read(2, 1, 1), 0x12);
    assert_eq!(f.cf8_read(2, 3, 1), 0x56);
    // Empty slots read as all ones.
    assert_eq!(f.cf8_read(7, 0, 4), 0xffff_ffff);
    // CONFIG_ADDRESS reads back (without the low two bits).
    let mut b = [0u8; 4];
    f.pio.read(CONFIG_ADDRESS_PORT, &mut b, &O);
    assert_eq!(u32::from_le_bytes(b), cf8_address(7, 0));
    // With the enable bit clear, data reads all ones and writes are dropped.
    f.pio
        .write(CONFIG_ADDRESS_PORT, &0x0000_1000u32.to_le_bytes(), &O);
    f.pio.read(CONFIG_ADDRESS_PORT + 4, &mut b, &O);
    assert_eq!(b, [0xff; 4]);
}

#[test]
fn ecam_sees_the_same_functions() {
    let f = fixture();
    assert_eq!(f.ecam_read32(0, 0), 0x1237_8086);
    assert_eq!(f.ecam_read32(2, 0), 0x5678_1234);
    assert_eq!(f.ecam_read32(2, 0x100), 0, "no extended capabilities");
    // Bus 1 has nothing.
    let mut b = [0u8; 4];
    f.mmio.read(PCI_ECAM_START + (1 << 20), &mut b, &O);
    assert_eq!(b, [0xff; 4]);
    // A write through ECAM is seen through CF8.
    let addr = PCI_ECAM_START + (u64::from(devfn(2, 0)) << 12) + 0x3c;
    f.mmio.write(addr, &[0x0b], &O);
    assert_eq!(f.cf8_read(2, 0x3c, 1), 0x0b);
}

#[test]
fn bars_are_preassigned_but_not_decoded_until_enabled() {
    let f = fixture();
    assert_eq!(
        f.cf8_read(2, 0x10, 4),
        u32::try_from(PCI_MMIO32_START).unwrap()
    );
    assert_eq!(
        f.cf8_read(2, 0x14, 4),
        u32::try_from(PCI_IO_START).unwrap() | 1
    );
    assert!(f.root.mapped_bars(devfn(2, 0)).is_empty());
    let mut b = [0u8; 1];
    assert_eq!(f.mmio.read(PCI_MMIO32_START, &mut b, &O), Access::Unclaimed);
    f.cf8_write(2, CMD, 2, u32::from(COMMAND_MEMORY | COMMAND_IO));
    assert_eq!(
        f.mmio.read(PCI_MMIO32_START + 8, &mut b, &O),
        Access::Handled
    );
    assert_eq!(b, [1]);
    assert_eq!(f.pio.read(PCI_IO_START + 4, &mut b, &O), Access::Handled);
    assert_eq!(b, [2]);
    f.mmio.write(PCI_MMIO32_START + 0x10, &[9, 9], &O);
    assert_eq!(f.dev.lock().unwrap().accesses, vec![(0, 0x10, vec![9, 9])]);
}

#[test]
fn sizing_and_relocation_move_the_bus_range() {
    let f = fixture();
    f.cf8_write(2, CMD, 2, u32::from(COMMAND_MEMORY));
    // Size BAR 0 with decode on: it is taken off the bus while it holds the size mask.
    f.cf8_write(2, 0x10, 4, 0xffff_ffff);
    assert_eq!(f.cf8_read(2, 0x10, 4), 0xffff_f000);
    assert!(f.root.mapped_bars(devfn(2, 0)).is_empty());
    // Place it elsewhere.
    f.cf8_write(2, 0x10, 4, 0xd000_0000);
    let mut b = [0u8; 1];
    assert_eq!(f.mmio.read(PCI_MMIO32_START, &mut b, &O), Access::Unclaimed);
    assert_eq!(f.mmio.read(0xd000_0fff, &mut b, &O), Access::Handled);
    // A 16-bit write to the BAR's upper half moves it again.
    f.cf8_write(2, 0x12, 2, 0xd100);
    assert_eq!(f.mmio.read(0xd000_0000, &mut b, &O), Access::Unclaimed);
    assert_eq!(f.mmio.read(0xd100_0000, &mut b, &O), Access::Handled);
    // Turning decode off takes it off the bus.
    f.cf8_write(2, CMD, 2, 0);
    assert_eq!(f.mmio.read(0xd100_0000, &mut b, &O), Access::Unclaimed);
    // The device heard of every change to BAR 0, in order (BAR 1, I/O, never decoded).
    let hooks = f.dev.lock().unwrap().hooks.clone();
    assert_eq!(
        hooks,
        vec![
            (true, 0, PCI_MMIO32_START),
            (false, 0, PCI_MMIO32_START),
            (true, 0, 0xd000_0000),
            (false, 0, 0xd000_0000),
            (true, 0, 0xd100_0000),
            (false, 0, 0xd100_0000),
        ]
    );
}

#[test]
fn bar_over_another_device_stays_unmapped() {
    let f = fixture();
    f.cf8_write(2, CMD, 2, u32::from(COMMAND_MEMORY));
    // On top of the ECAM window: refused by the bus, logged, and the ECAM still works.
    f.cf8_write(2, 0x10, 4, u32::try_from(PCI_ECAM_START).unwrap());
    assert!(f.root.mapped_bars(devfn(2, 0)).is_empty());
    let refused = (true, 0, PCI_ECAM_START);
    assert!(
        !f.dev.lock().unwrap().hooks.contains(&refused),
        "told of a refused mapping"
    );
    assert_eq!(f.ecam_read32(0, 0), 0x1237_8086);
    // Moving it somewhere free maps it.
    f.cf8_write(2, 0x10, 4, 0xc800_0000);
    assert_eq!(f.root.mapped_bars(devfn(2, 0))[0].base, 0xc800_0000);
}

#[test]
fn reset_control_register_requests_a_reset() {
    let f = fixture();
    f.pio.write(CONFIG_ADDRESS_PORT + 1, &[0x02], &O);
    assert!(!f.stop.is_requested());
    let mut b = [0u8; 1];
    f.pio.read(CONFIG_ADDRESS_PORT + 1, &mut b, &O);
    assert_eq!(b, [0x02]);
    f.pio.write(CONFIG_ADDRESS_PORT + 1, &[0x06], &O);
    assert_eq!(f.stop.outcome(), Some(GuestStop::Reset));
}

#[test]
fn slots_and_functions_are_checked() {
    let f = fixture();
    let again = Arc::new(Mutex::new(TestDevice::new()));
    assert!(matches!(
        f.root.add_device(devfn(2, 0), "again", again),
        Err(PciError::InUse(2, 0))
    ));
    assert_eq!(f.root.free_slot().unwrap(), 3);
    // Until the window runs out, every device gets distinct BARs.
    for _ in 0..8 {
        let slot = f.root.free_slot().unwrap();
        let dev = Arc::new(Mutex::new(TestDevice::new()));
        f.root.add_device(devfn(slot, 0), "more", dev).unwrap();
    }
    assert_eq!(
        f.cf8_read(3, 0x10, 4),
        u32::try_from(PCI_MMIO32_START + 0x1000).unwrap()
    );
}
