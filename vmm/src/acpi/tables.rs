//! The platform's ACPI tables, built once for both boot paths, with QEMU's linker/loader
//! script: the tables in "etc/acpi/tables", the RSDP in "etc/acpi/rsdp", and the script
//! ("etc/table-loader") that allocates both, patches the pointers between tables with their
//! final addresses, and computes the checksums. A firmware boot hands the three files to
//! SeaBIOS or OVMF through fw_cfg; a direct kernel boot runs the script itself
//! ([`super::create_acpi_tables`]).
//!
//! The FADT is a full (not hardware-reduced) one: PM1a event/control, the PM timer and GPE0
//! at `ACPI_PM_BASE`, the SCI on IRQ 9, the reset register at 0xCF9, no SMI command port (the
//! platform is always in ACPI mode), and a FACS. IAPC_BOOT_ARCH says legacy devices but no
//! 8042: the i8042 at 0x60/0x64 only takes the reset command, it has no keyboard or mouse
//! behind it and would fail an OS's probe.

use acpi_tables::facs::FACS;
use acpi_tables::fadt::{FADTBuilder, Flags, PmProfile};
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};
use acpi_tables::mcfg::MCFG;
use acpi_tables::sdt::Sdt;

use super::dsdt::{self, PciRoot};
use super::OEM_TABLE_ID;
use super::{madt_bytes, to_bytes, AcpiError, InterruptSourceOverride, OEM_ID, OEM_REVISION};
use crate::layout::{
    ACPI_GPE0_BLK, ACPI_GPE0_LEN, ACPI_PM1A_CNT, ACPI_PM1A_EVT, ACPI_PM_TMR, ACPI_SCI_IRQ,
    RESET_CONTROL_PORT,
};
use devices::fw_cfg::loader::{Command, TableLoader, Zone};
use devices::reset::RESET_CONTROL_VALUE;

/// The fw_cfg file holding the tables.
pub const TABLES_FILE: &str = "etc/acpi/tables";
/// The fw_cfg file holding the RSDP.
pub const RSDP_FILE: &str = "etc/acpi/rsdp";
/// The fw_cfg file holding the loader script.
pub const LOADER_FILE: &str = "etc/table-loader";

/// IAPC_BOOT_ARCH: legacy (ISA) devices are present; no 8042 (bit 1 clear).
const IAPC_LEGACY_DEVICES: u16 = 0x1;
/// MADT interrupt flags: level-triggered, active high.
const LEVEL_HIGH: u16 = 0x000d;

/// The three fw_cfg files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableFiles {
    /// "etc/acpi/tables".
    pub tables: Vec<u8>,
    /// "etc/acpi/rsdp".
    pub rsdp: Vec<u8>,
    /// "etc/table-loader".
    pub loader: TableLoader,
}

/// Collects tables into one file and records the loader commands that link them.
struct Builder {
    blob: Vec<u8>,
    loader: TableLoader,
}

impl Builder {
    /// Appends a table at an `align`-byte boundary, returns its offset.
    fn add(&mut self, table: &[u8], align: usize) -> u32 {
        self.blob.resize(self.blob.len().next_multiple_of(align), 0);
        let at = self.blob.len();
        self.blob.extend_from_slice(table);
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    /// Makes the `size`-byte field at `table + field` (which holds `target`'s offset in the
    /// file) an absolute address once the file is placed.
    fn pointer(&mut self, table: u32, field: u32, size: u8, target: u32) {
        let at = (table + field) as usize;
        let target = u64::from(target).to_le_bytes();
        self.blob[at..at + usize::from(size)].copy_from_slice(&target[..usize::from(size)]);
        self.loader.push(Command::AddPointer {
            dest: TABLES_FILE.into(),
            src: TABLES_FILE.into(),
            offset: table + field,
            size,
        });
    }

    /// Clears the checksum of the table at `table` and asks the loader to compute it.
    fn checksum(&mut self, table: u32) {
        let at = table as usize;
        self.blob[at + 9] = 0;
        let len = u32::from_le_bytes([
            self.blob[at + 4],
            self.blob[at + 5],
            self.blob[at + 6],
            self.blob[at + 7],
        ]);
        self.loader.push(Command::AddChecksum {
            file: TABLES_FILE.into(),
            offset: table + 9,
            start: table,
            length: len,
        });
    }
}

fn io_gas(width_bits: u8, port: u64, access: AccessSize) -> GAS {
    GAS::new(AddressSpace::SystemIo, width_bits, 0, access, port)
}

fn port32(p: u64) -> u32 {
    u32::try_from(p).unwrap_or(0)
}

/// The FADT's bytes, with the DSDT and FACS fields zero (the loader fills them).
fn fadt() -> Vec<u8> {
    let mut f = FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION)
        .preferred_pm_profile(PmProfile::Unspecified)
        .flag(Flags::Wbinvd)
        .flag(Flags::ProcC1)
        .flag(Flags::SlpButton)
        .flag(Flags::RtcS4)
        .flag(Flags::ResetRegSup)
        .gpe_info(port32(ACPI_GPE0_BLK), 0, 16, 0, 0);
    f.sci_int = u16::try_from(ACPI_SCI_IRQ).unwrap_or(9).into();
    f.pm1a_evt_blk = port32(ACPI_PM1A_EVT).into();
    f.pm1a_cnt_blk = port32(ACPI_PM1A_CNT).into();
    f.pm_tmr_blk = port32(ACPI_PM_TMR).into();
    f.pm1_evt_len = 4;
    f.pm1_cnt_len = 2;
    f.pm_tmr_len = 4;
    f.gpe0_blk_len = u8::try_from(ACPI_GPE0_LEN).unwrap_or(16);
    // C2/C3 are not supported.
    f.p_lvl2_lat = 0xfff.into();
    f.p_lvl3_lat = 0xffff.into();
    f.century = 0x32;
    f.iapc_boot_arch = IAPC_LEGACY_DEVICES.into();
    f.reset_reg = io_gas(8, RESET_CONTROL_PORT, AccessSize::ByteAccess);
    f.reset_value = RESET_CONTROL_VALUE;
    f.x_pm1a_evt_blk = io_gas(32, ACPI_PM1A_EVT, AccessSize::WordAccess);
    f.x_pm1a_cnt_blk = io_gas(16, ACPI_PM1A_CNT, AccessSize::WordAccess);
    f.x_pm_tmr_blk = io_gas(32, ACPI_PM_TMR, AccessSize::DwordAccess);
    f.x_gpe0_blk = io_gas(128, ACPI_GPE0_BLK, AccessSize::ByteAccess);
    to_bytes(&f.finalize())
}

/// FADT field offsets (ACPI 6.5, table 5.9).
const FADT_FIRMWARE_CTRL: u32 = 36;
const FADT_DSDT: u32 = 40;
const FADT_X_FIRMWARE_CTRL: u32 = 132;
const FADT_X_DSDT: u32 = 140;

/// QEMU's ISA overrides for a PC with the KVM irqchip routed as QEMU routes it: the PIT's
/// IRQ 0 on GSI 2, and IRQs 5, 9 (the SCI), 10 and 11 level-triggered, active high.
pub fn isa_overrides() -> Vec<InterruptSourceOverride> {
    let mut v = vec![InterruptSourceOverride::new(0, 2, 0)];
    v.extend(
        [5u8, 9, 10, 11].map(|irq| InterruptSourceOverride::new(irq, u32::from(irq), LEVEL_HIGH)),
    );
    v
}

/// Builds the tables for `cpus` vCPUs and the PCI root `root`.
pub fn build_tables(cpus: usize, root: &PciRoot) -> Result<TableFiles, AcpiError> {
    let mut b = Builder {
        blob: Vec::new(),
        loader: TableLoader::new(),
    };
    b.loader.push(Command::Allocate {
        file: TABLES_FILE.into(),
        align: 64,
        zone: Zone::High,
    });

    // The FACS has no checksum and must be 64-byte aligned: first in the file.
    let facs = b.add(&to_bytes(&FACS::new()), 64);

    let mut dsdt_t = Sdt::new(*b"DSDT", 36, 2, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    dsdt_t.append_slice(&dsdt::body(root));
    let dsdt = b.add(dsdt_t.as_slice(), 16);
    b.checksum(dsdt);

    let fadt_at = b.add(&fadt(), 16);
    b.pointer(fadt_at, FADT_FIRMWARE_CTRL, 4, facs);
    b.pointer(fadt_at, FADT_DSDT, 4, dsdt);
    b.pointer(fadt_at, FADT_X_DSDT, 8, dsdt);
    // X_FIRMWARE_CTRL stays zero: FIRMWARE_CTRL names the FACS (the spec allows only one).
    let _ = FADT_X_FIRMWARE_CTRL;
    b.checksum(fadt_at);

    let madt = b.add(&madt_bytes(cpus, &isa_overrides())?, 16);
    b.checksum(madt);

    let mut entries = vec![fadt_at, madt];
    if let Some(base) = root.ecam_base {
        let mut mcfg = MCFG::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
        mcfg.add_ecam(base, 0, 0, root.last_bus);
        let at = b.add(&to_bytes(&mcfg), 16);
        b.checksum(at);
        entries.push(at);
    }

    // RSDT (32-bit entries, for older OSes) and XSDT.
    let mut rsdt = Sdt::new(*b"RSDT", 36, 1, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    let mut xsdt = Sdt::new(*b"XSDT", 36, 1, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    for &e in &entries {
        rsdt.append_slice(&e.to_le_bytes());
        xsdt.append_slice(&u64::from(e).to_le_bytes());
    }
    let rsdt_at = b.add(rsdt.as_slice(), 16);
    for (i, &e) in entries.iter().enumerate() {
        let field = 36 + u32::try_from(i * 4).unwrap_or(0);
        b.pointer(rsdt_at, field, 4, e);
    }
    b.checksum(rsdt_at);
    let xsdt_at = b.add(xsdt.as_slice(), 16);
    for (i, &e) in entries.iter().enumerate() {
        let field = 36 + u32::try_from(i * 8).unwrap_or(0);
        b.pointer(xsdt_at, field, 8, e);
    }
    b.checksum(xsdt_at);

    // The RSDP (revision 2) in the F segment.
    let mut rsdp = vec![0u8; 36];
    rsdp[..8].copy_from_slice(b"RSD PTR ");
    rsdp[9..15].copy_from_slice(&OEM_ID);
    rsdp[15] = 2;
    rsdp[16..20].copy_from_slice(&rsdt_at.to_le_bytes());
    rsdp[20..24].copy_from_slice(&36u32.to_le_bytes());
    rsdp[24..32].copy_from_slice(&u64::from(xsdt_at).to_le_bytes());
    b.loader.push(Command::Allocate {
        file: RSDP_FILE.into(),
        align: 16,
        zone: Zone::FSeg,
    });
    for (offset, size) in [(16u32, 4u8), (24, 8)] {
        b.loader.push(Command::AddPointer {
            dest: RSDP_FILE.into(),
            src: TABLES_FILE.into(),
            offset,
            size,
        });
    }
    b.loader.push(Command::AddChecksum {
        file: RSDP_FILE.into(),
        offset: 8,
        start: 0,
        length: 20,
    });
    b.loader.push(Command::AddChecksum {
        file: RSDP_FILE.into(),
        offset: 32,
        start: 0,
        length: 36,
    });
    Ok(TableFiles {
        tables: b.blob,
        rsdp,
        loader: b.loader,
    })
}

#[cfg(test)]
mod tests;
