//! Tests of the platform's ACPI tables: run the loader script as the firmware does and walk
//! the result from the RSDP.

use super::*;
use devices::fw_cfg::loader::execute;

const TABLES_AT: u64 = 0x7ff0_0000;
const RSDP_AT: u64 = 0xf_5000;

fn root() -> PciRoot {
    PciRoot {
        ecam_base: Some(0xe000_0000),
        last_bus: 255,
        mmio32: vec![(0xc000_0000, 0xdfff_ffff)],
        mmio64: None,
        intx_gsis: [16, 17, 18, 19],
    }
}

/// Runs the loader; returns (tables, rsdp) as placed at TABLES_AT and RSDP_AT.
fn load(t: &TableFiles) -> (Vec<u8>, Vec<u8>) {
    let mut files = vec![
        (TABLES_FILE.to_string(), t.tables.clone()),
        (RSDP_FILE.to_string(), t.rsdp.clone()),
    ];
    let placed = execute(&t.loader, &mut files, |name, _, align| {
        let at = if name == TABLES_FILE {
            TABLES_AT
        } else {
            RSDP_AT
        };
        assert_eq!(at % u64::from(align), 0);
        at
    })
    .unwrap();
    assert_eq!(placed.len(), 2, "both files allocated");
    (files[0].1.clone(), files[1].1.clone())
}

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The table at guest address `addr`, checked for a valid checksum.
fn table(tables: &[u8], addr: u64) -> &[u8] {
    let off = usize::try_from(addr - TABLES_AT).unwrap();
    let len = u32_at(tables, off + 4) as usize;
    let t = &tables[off..off + len];
    assert_eq!(
        sum(t),
        0,
        "checksum of {}",
        String::from_utf8_lossy(&t[..4])
    );
    t
}

#[test]
fn rsdp_links_rsdt_and_xsdt_with_valid_checksums() {
    let t = build_tables(2, &root()).unwrap();
    let (tables, rsdp) = load(&t);
    assert_eq!(&rsdp[..8], b"RSD PTR ");
    assert_eq!(sum(&rsdp[..20]), 0);
    assert_eq!(sum(&rsdp), 0);
    assert_eq!(rsdp[15], 2);
    let rsdt = table(&tables, u64::from(u32_at(&rsdp, 16)));
    let xsdt = table(&tables, u64_at(&rsdp, 24));
    assert_eq!(&rsdt[..4], b"RSDT");
    assert_eq!(&xsdt[..4], b"XSDT");
    let sigs: Vec<&[u8]> = xsdt[36..]
        .chunks(8)
        .map(|e| &table(&tables, u64::from_le_bytes(e.try_into().unwrap()))[..4])
        .collect();
    assert_eq!(sigs, vec![&b"FACP"[..], b"APIC", b"MCFG"]);
    let rsdt_entries: Vec<u64> = rsdt[36..]
        .chunks(4)
        .map(|e| u64::from(u32::from_le_bytes(e.try_into().unwrap())))
        .collect();
    let xsdt_entries: Vec<u64> = xsdt[36..]
        .chunks(8)
        .map(|e| u64::from_le_bytes(e.try_into().unwrap()))
        .collect();
    assert_eq!(rsdt_entries, xsdt_entries);
}

#[test]
fn fadt_is_full_and_points_at_dsdt_facs_and_the_pm_block() {
    let t = build_tables(1, &root()).unwrap();
    let (tables, rsdp) = load(&t);
    let xsdt = table(&tables, u64_at(&rsdp, 24));
    let fadt = table(&tables, u64_at(xsdt, 36));
    assert_eq!(&fadt[..4], b"FACP");
    let flags = u32_at(fadt, 112);
    assert_eq!(flags & (1 << 20), 0, "not hardware-reduced");
    assert_ne!(flags & (1 << 10), 0, "reset register supported");
    assert_eq!(u32_at(fadt, 46) & 0xffff, ACPI_SCI_IRQ);
    assert_eq!(u32_at(fadt, 48), 0, "no SMI command port");
    assert_eq!(u64::from(u32_at(fadt, 56)), ACPI_PM1A_EVT);
    assert_eq!(u64::from(u32_at(fadt, 64)), ACPI_PM1A_CNT);
    assert_eq!(u64::from(u32_at(fadt, 76)), ACPI_PM_TMR);
    assert_eq!(u64::from(u32_at(fadt, 80)), ACPI_GPE0_BLK);
    assert_eq!(fadt[91], 4, "PM_TMR_LEN");
    // IAPC_BOOT_ARCH: legacy devices, no 8042 (nothing behind it would answer a probe).
    let boot_arch = u16::from_le_bytes([fadt[109], fadt[110]]);
    assert_eq!(boot_arch & 0b11, 0b01);
    // Reset register: I/O space, 8 bits, at 0xCF9, value 6.
    assert_eq!(fadt[116], 1);
    assert_eq!(u64_at(fadt, 120), RESET_CONTROL_PORT);
    assert_eq!(fadt[128], RESET_CONTROL_VALUE);
    let dsdt = table(&tables, u64::from(u32_at(fadt, 40)));
    assert_eq!(&dsdt[..4], b"DSDT");
    assert_eq!(u64_at(fadt, 140), u64::from(u32_at(fadt, 40)));
    let facs_at = usize::try_from(u64::from(u32_at(fadt, 36)) - TABLES_AT).unwrap();
    assert_eq!(&tables[facs_at..facs_at + 4], b"FACS");
    assert_eq!((TABLES_AT + u64::try_from(facs_at).unwrap()) % 64, 0);
}

#[test]
fn madt_has_qemus_isa_overrides_and_mcfg_the_ecam_base() {
    let t = build_tables(3, &root()).unwrap();
    let (tables, rsdp) = load(&t);
    let xsdt = table(&tables, u64_at(&rsdp, 24));
    let madt = table(&tables, u64_at(xsdt, 44));
    let mut overrides = Vec::new();
    let mut lapics = 0;
    let mut off = 44;
    while off < madt.len() {
        match madt[off] {
            0 => lapics += 1,
            2 => overrides.push((madt[off + 3], u32_at(madt, off + 4))),
            _ => {}
        }
        off += madt[off + 1] as usize;
    }
    assert_eq!(lapics, 3);
    assert_eq!(overrides, vec![(0, 2), (5, 5), (9, 9), (10, 10), (11, 11)]);
    let mcfg = table(&tables, u64_at(xsdt, 52));
    assert_eq!(u64_at(mcfg, 44), 0xe000_0000);
    assert_eq!((mcfg[54], mcfg[55]), (0, 255));
}

#[test]
fn no_ecam_means_no_mcfg() {
    let mut r = root();
    r.ecam_base = None;
    let t = build_tables(1, &r).unwrap();
    let (tables, rsdp) = load(&t);
    let xsdt = table(&tables, u64_at(&rsdp, 24));
    assert_eq!(xsdt.len(), 36 + 16);
}
