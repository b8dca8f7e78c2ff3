//! The DSDT's AML, the same for both boot paths: the PCI root bridge with its resources and
//! interrupt routing, holding COM1, the RTC, the hvprof hypercall device and the motherboard
//! resources (PM block, fw_cfg, ECAM); the power button; `_S5`.

use acpi_tables::aml::{
    AddressSpace, AddressSpaceCacheable, Device, EISAName, Interrupt, Memory32Fixed, Name, Package,
    Path, ResourceTemplate, Scope, IO,
};
use acpi_tables::Aml;
use profile_core::abi::{DOORBELL_PORT_BASE, DOORBELL_PORT_COUNT};

use crate::layout::{
    ACPI_PM_BASE, FW_CFG_LEN, FW_CFG_PORT, PCI_ECAM_SIZE, PCI_ECAM_START, PCI_MMIO32_WINDOWS,
};
use devices::acpi_pm::S5_SLP_TYP;
use devices::cmos::{CMOS_LEN, CMOS_PORT};
use devices::pci::intx_gsi;

/// The `_HID` of the hvprof hypercall device (the Windows agent's driver matches it).
pub const HYPERCALL_HID: &str = "HVPR0001";

/// COM1's device, built on demand (the AML types borrow their parts).
struct Com1 {
    io: IO,
    irq: Interrupt,
}

fn com1() -> Com1 {
    Com1 {
        io: IO::new(0x3f8, 0x3f8, 0, 8),
        irq: Interrupt::new(true, true, false, false, 4),
    }
}

impl Com1 {
    fn with<R>(&self, f: impl FnOnce(&Device<'_>) -> R) -> R {
        let crs = ResourceTemplate::new(vec![&self.io, &self.irq]);
        let hid_v = EISAName::new("PNP0501");
        let hid = Name::new("_HID".into(), &hid_v);
        let uid = Name::new("_UID".into(), &0u8);
        let crs = Name::new("_CRS".into(), &crs);
        f(&Device::new("COM1".into(), vec![&hid, &uid, &crs]))
    }
}

/// The PCI root bridge as the ACPI tables describe it. The PCI host bridge must
/// decode exactly this: ECAM at `ecam_base` for buses `0..=last_bus`, BARs in the windows,
/// and INTx of device `slot`, pin `p` (0 = INTA) on GSI `intx_gsis[(slot + p) % 4]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciRoot {
    /// ECAM base (MCFG), or None for a legacy-only (0xCF8/0xCFC) host bridge.
    pub ecam_base: Option<u64>,
    /// Last bus number.
    pub last_bus: u8,
    /// 32-bit MMIO windows, inclusive ends.
    pub mmio32: Vec<(u32, u32)>,
    /// An optional 64-bit MMIO window, inclusive end.
    pub mmio64: Option<(u64, u64)>,
    /// The GSIs of the four swizzled INTx lines.
    pub intx_gsis: [u32; 4],
}

impl PciRoot {
    /// The PCI root of hvprof's platform (both boot paths), from the layout's constants.
    pub fn platform() -> PciRoot {
        PciRoot {
            ecam_base: Some(PCI_ECAM_START),
            last_bus: u8::try_from((PCI_ECAM_SIZE >> 20) - 1).unwrap_or(u8::MAX),
            mmio32: PCI_MMIO32_WINDOWS.to_vec(),
            mmio64: None,
            // The _PRT maps slot s, pin p (INTA = 0) to intx_gsis[(s + p) % 4]: take the GSIs
            // from the devices' own routing, so the tables describe what the hardware does.
            intx_gsis: [0u8, 1, 2, 3].map(|k| u32::from(intx_gsi(k, 1))),
        }
    }

    /// The size of the ECAM region for the described buses.
    pub fn ecam_size(&self) -> u64 {
        (u64::from(self.last_bus) + 1) << 20
    }
}

fn pci_root_aml(root: &PciRoot, children: &[&dyn Aml]) -> Vec<u8> {
    let hid_v = EISAName::new("PNP0A08");
    let cid_v = EISAName::new("PNP0A03");
    let hid = Name::new("_HID".into(), &hid_v);
    let cid = Name::new("_CID".into(), &cid_v);
    let adr = Name::new("_ADR".into(), &0u8);
    let seg = Name::new("_SEG".into(), &0u8);
    let uid = Name::new("_UID".into(), &0u8);
    let bbn = Name::new("_BBN".into(), &0u8);

    let buses = AddressSpace::<u16>::new_bus_number(0, u16::from(root.last_bus));
    let cfg_io = IO::new(0xcf8, 0xcf8, 1, 8);
    let io_low = AddressSpace::<u16>::new_io(0, 0xcf7, None);
    let io_high = AddressSpace::<u16>::new_io(0xd00, 0xffff, None);
    let vga = AddressSpace::<u32>::new_memory(
        AddressSpaceCacheable::Cacheable,
        true,
        0xa_0000,
        0xb_ffff,
        None,
    );
    let windows: Vec<AddressSpace<u32>> = root
        .mmio32
        .iter()
        .map(|&(lo, hi)| {
            AddressSpace::new_memory(AddressSpaceCacheable::NotCacheable, true, lo, hi, None)
        })
        .collect();
    let high = root.mmio64.map(|(lo, hi)| {
        AddressSpace::<u64>::new_memory(AddressSpaceCacheable::NotCacheable, true, lo, hi, None)
    });
    let mut res: Vec<&dyn Aml> = vec![&buses, &cfg_io, &io_low, &io_high, &vga];
    res.extend(windows.iter().map(|w| w as &dyn Aml));
    if let Some(h) = &high {
        res.push(h);
    }
    let crs_t = ResourceTemplate::new(res);
    let crs = Name::new("_CRS".into(), &crs_t);

    // _PRT: every slot's four pins, swizzled onto the four GSIs (APIC mode; source 0 means
    // the source index is a GSI).
    let entries: Vec<(u32, u8, u32)> = (0u32..32)
        .flat_map(|slot| {
            (0u8..4).map(move |pin| {
                let line = (slot + u32::from(pin)) % 4;
                ((slot << 16) | 0xffff, pin, line)
            })
        })
        .map(|(adr, pin, line)| (adr, pin, root.intx_gsis[line as usize]))
        .collect();
    let packages: Vec<Package<'_>> = entries
        .iter()
        .map(|(adr, pin, gsi)| Package::new(vec![adr, pin, &0u8, gsi]))
        .collect();
    let prt_v = Package::new(packages.iter().map(|p| p as &dyn Aml).collect());
    let prt = Name::new("_PRT".into(), &prt_v);

    let mut parts: Vec<&dyn Aml> = vec![&hid, &cid, &adr, &seg, &uid, &bbn, &crs, &prt];
    parts.extend_from_slice(children);
    let mut out = Vec::new();
    Device::new("PCI0".into(), parts).to_aml_bytes(&mut out);
    out
}

/// The DSDT body (everything after the table header).
pub fn body(root: &PciRoot) -> Vec<u8> {
    // The hypercall device: its doorbell ports are its resources, so a PnP driver gets them.
    let hv_io = IO::new(
        DOORBELL_PORT_BASE,
        DOORBELL_PORT_BASE,
        1,
        u8::try_from(DOORBELL_PORT_COUNT).unwrap_or(u8::MAX),
    );
    let hv_crs_t = ResourceTemplate::new(vec![&hv_io]);
    let hv_hid = Name::new("_HID".into(), &HYPERCALL_HID);
    let hv_uid = Name::new("_UID".into(), &0u8);
    let hv_crs = Name::new("_CRS".into(), &hv_crs_t);
    let hvpr = Device::new("HVPR".into(), vec![&hv_hid, &hv_uid, &hv_crs]);

    // Motherboard resources: the PM block, fw_cfg and ECAM stay out of the PCI allocator
    // (Windows and Linux also want ECAM reserved here before they trust the MCFG).
    let pm_io = IO::new(
        u16::try_from(ACPI_PM_BASE).unwrap_or(0),
        u16::try_from(ACPI_PM_BASE).unwrap_or(0),
        1,
        0x40,
    );
    let fw_io = IO::new(
        u16::try_from(FW_CFG_PORT).unwrap_or(0),
        u16::try_from(FW_CFG_PORT).unwrap_or(0),
        1,
        u8::try_from(FW_CFG_LEN).unwrap_or(0),
    );
    let ecam = root.ecam_base.map(|base| {
        Memory32Fixed::new(
            false,
            u32::try_from(base).unwrap_or(0),
            u32::try_from(root.ecam_size()).unwrap_or(0),
        )
    });
    let mut mres: Vec<&dyn Aml> = vec![&pm_io, &fw_io];
    if let Some(e) = &ecam {
        mres.push(e);
    }
    let mres_t = ResourceTemplate::new(mres);
    let mres_hid_v = EISAName::new("PNP0C02");
    let mres_hid = Name::new("_HID".into(), &mres_hid_v);
    let mres_uid = Name::new("_UID".into(), &1u8);
    let mres_crs = Name::new("_CRS".into(), &mres_t);
    let mres_dev = Device::new("MRES".into(), vec![&mres_hid, &mres_uid, &mres_crs]);

    let pwrb_hid_v = EISAName::new("PNP0C0C");
    let pwrb_hid = Name::new("_HID".into(), &pwrb_hid_v);
    let pwrb_uid = Name::new("_UID".into(), &0u8);
    let pwrb = Device::new("PWRB".into(), vec![&pwrb_hid, &pwrb_uid]);

    // The RTC (the CMOS device's clock). No IRQ 8: the device raises no interrupts, so it
    // offers no alarms or update interrupts, and the table says so by listing none.
    let rtc_io = IO::new(
        u16::try_from(CMOS_PORT).unwrap_or(0x70),
        u16::try_from(CMOS_PORT).unwrap_or(0x70),
        1,
        u8::try_from(CMOS_LEN).unwrap_or(2),
    );
    let rtc_crs_t = ResourceTemplate::new(vec![&rtc_io]);
    let rtc_hid_v = EISAName::new("PNP0B00");
    let rtc_hid = Name::new("_HID".into(), &rtc_hid_v);
    let rtc_crs = Name::new("_CRS".into(), &rtc_crs_t);
    let rtc = Device::new("RTC_".into(), vec![&rtc_hid, &rtc_crs]);

    let com1 = com1();
    let mut out = Vec::new();
    // The PCI root holds COM1, the RTC, the hypercall device and the motherboard resources,
    // as the ISA devices behind QEMU's LPC bridge; the power button sits on the system bus.
    let pci0 = com1.with(|c| pci_root_aml(root, &[c, &rtc, &hvpr, &mres_dev]));
    let raw = RawAml(pci0);
    Scope::new(Path::new("\\_SB_"), vec![&raw, &pwrb]).to_aml_bytes(&mut out);
    let typ = u8::try_from(S5_SLP_TYP).unwrap_or(0);
    let s5 = Package::new(vec![&typ, &typ, &0u8, &0u8]);
    Name::new("_S5_".into(), &s5).to_aml_bytes(&mut out);
    out
}

/// Already-encoded AML.
struct RawAml(Vec<u8>);

impl Aml for RawAml {
    fn to_aml_bytes(&self, sink: &mut dyn acpi_tables::AmlSink) {
        sink.vec(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PciRoot {
        PciRoot {
            ecam_base: Some(0xe000_0000),
            last_bus: 255,
            mmio32: vec![(0xc000_0000, 0xdfff_ffff)],
            mmio64: None,
            intx_gsis: [16, 17, 18, 19],
        }
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn dsdt_names_the_hypercall_device_and_its_ports() {
        let aml = body(&root());
        assert!(contains(&aml, b"HVPR0001\0"));
        // IO descriptor: 0x47, decode16, min, max, align, length.
        let base = DOORBELL_PORT_BASE.to_le_bytes();
        let io = [0x47, 1, base[0], base[1], base[0], base[1], 1, 8];
        assert!(contains(&aml, &io));
        for name in [
            &b"PCI0"[..],
            b"COM1",
            b"RTC_",
            b"PWRB",
            b"MRES",
            b"_PRT",
            b"_S5_",
        ] {
            assert!(contains(&aml, name), "{}", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn prt_routes_slot_pins_to_the_given_gsis() {
        let mut r = root();
        r.intx_gsis = [0x55, 0x56, 0x57, 0x58];
        let aml = body(&r);
        // Slot 1, pin 0 -> line 1 -> 0x56: Package(4){0x0001FFFF, Zero, Zero, 0x56}
        let entry = [
            0x12, 0x0b, 0x04, 0x0c, 0xff, 0xff, 0x01, 0x00, 0x00, 0x00, 0x0a, 0x56,
        ];
        assert!(contains(&aml, &entry));
    }

    #[test]
    fn pci_root_matches_the_layout() {
        let p = PciRoot::platform();
        assert_eq!(p.ecam_size(), PCI_ECAM_SIZE);
    }

    /// The DSDT's _PRT gives slot s, pin p (INTA = 0) the GSI intx_gsis[(s + p) % 4]; it must
    /// be the GSI the device raises (regression: the tables once said GSIs 16-19 while the
    /// devices raised 10 and 11).
    #[test]
    fn prt_agrees_with_the_devices_intx_routing() {
        let p = PciRoot::platform();
        for slot in 0u8..32 {
            for pin in 0u8..4 {
                let prt = p.intx_gsis[usize::from((slot + pin) % 4)];
                assert_eq!(
                    prt,
                    u32::from(intx_gsi(slot, pin + 1)),
                    "slot {slot} pin {pin}"
                );
            }
        }
    }
}
