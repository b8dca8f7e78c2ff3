//! What fw_cfg tells the firmware about the VM, as QEMU's PC machine does: RAM size, CPU
//! counts, no graphics (SeaBIOS then mirrors its screen on COM1), the e820 map, the ACPI
//! tables and their loader script, the boot-failure wait, and the boot order.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::acpi::tables::{build_tables, LOADER_FILE, RSDP_FILE, TABLES_FILE};
use crate::acpi::{AcpiError, PciRoot};
use crate::layout::{KVM_IDENTITY_MAP_ADDRESS, KVM_PRIVATE_SIZE, RAM_ABOVE_4G_START};
use crate::memory::{low_ram_end, RangeKind};
use crate::outcome::{Blame, Fault};
use devices::fw_cfg::{keys, FwCfgBuilder, FwCfgError, Item};

/// Errors building the firmware's configuration.
#[derive(Debug, thiserror::Error)]
pub enum CfgError {
    /// ACPI tables.
    #[error(transparent)]
    Acpi(#[from] AcpiError),
    /// An fw_cfg item.
    #[error(transparent)]
    FwCfg(#[from] FwCfgError),
}

impl Blame for CfgError {
    fn fault(&self) -> Fault {
        match self {
            CfgError::Acpi(e) => e.fault(),
            // hvprof names and sizes every fw_cfg item itself.
            CfgError::FwCfg(_) => Fault::Host,
        }
    }
}

/// The VM as the firmware is told about it.
#[derive(Clone, Debug)]
pub struct FirmwareConfig {
    /// vCPUs.
    pub cpus: usize,
    /// Guest RAM in bytes.
    pub mem_size: u64,
    /// The PCI root the ACPI tables describe.
    pub pci: PciRoot,
    /// SeaBIOS's wait after "No bootable device" (None: forever).
    pub boot_fail_wait: Option<Duration>,
    /// OpenFirmware device paths in boot order (the fw_cfg "bootorder" file); empty: none.
    pub bootorder: Vec<String>,
}

/// One QEMU e820 entry: u64 address, u64 length, u32 type, little-endian.
fn e820_entry(out: &mut Vec<u8>, addr: u64, len: u64, kind: RangeKind) {
    out.extend_from_slice(&addr.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(kind as u32).to_le_bytes());
}

/// The e820 map QEMU gives firmware: all RAM below the hole (the firmware carves out its own
/// areas below 1 MiB), RAM above 4 GiB, and reservations for KVM's private pages and ECAM.
pub fn e820(mem_size: u64, pci: &PciRoot) -> Vec<u8> {
    let mut out = Vec::new();
    e820_entry(&mut out, 0, low_ram_end(mem_size), RangeKind::Ram);
    let low = low_ram_end(mem_size);
    if mem_size > low {
        e820_entry(&mut out, RAM_ABOVE_4G_START, mem_size - low, RangeKind::Ram);
    }
    e820_entry(
        &mut out,
        KVM_IDENTITY_MAP_ADDRESS,
        KVM_PRIVATE_SIZE,
        RangeKind::Reserved,
    );
    if let Some(base) = pci.ecam_base {
        e820_entry(&mut out, base, pci.ecam_size(), RangeKind::Reserved);
    }
    out
}

fn u16_le(v: usize) -> Vec<u8> {
    u16::try_from(v).unwrap_or(u16::MAX).to_le_bytes().to_vec()
}

/// The fw_cfg items for `c`.
pub fn fw_cfg_items(c: &FirmwareConfig) -> Result<BTreeMap<u16, Item>, CfgError> {
    let mut b = FwCfgBuilder::new();
    b.add_item(keys::UUID, vec![0; 16]);
    b.add_item(keys::RAM_SIZE, c.mem_size.to_le_bytes().to_vec());
    b.add_item(keys::NOGRAPHIC, 1u16.to_le_bytes().to_vec());
    b.add_item(keys::NB_CPUS, u16_le(c.cpus));
    b.add_item(keys::MAX_CPUS, u16_le(c.cpus));
    b.add_item(keys::BOOT_MENU, 0u16.to_le_bytes().to_vec());
    // NUMA: no nodes; the per-CPU map SeaBIOS expects after the count is all zeros.
    b.add_item(keys::NUMA, vec![0; 8 + 8 * c.cpus]);
    b.add_item(keys::IRQ0_OVERRIDE, 1u32.to_le_bytes().to_vec());
    b.add_item(keys::ACPI_TABLES, 0u16.to_le_bytes().to_vec());
    b.add_item(keys::SMBIOS_ENTRIES, 0u16.to_le_bytes().to_vec());
    b.add_item(keys::E820_TABLE, 0u32.to_le_bytes().to_vec());

    b.add_file("etc/e820", e820(c.mem_size, &c.pci))?;
    let tables = build_tables(c.cpus, &c.pci)?;
    b.add_file(TABLES_FILE, tables.tables)?;
    b.add_file(RSDP_FILE, tables.rsdp)?;
    b.add_file(LOADER_FILE, tables.loader.encode())?;
    // QEMU's -boot reboot-timeout: milliseconds, or -1 (as u32) to wait forever.
    let wait = c.boot_fail_wait.map_or(u32::MAX, |d| {
        u32::try_from(d.as_millis()).unwrap_or(u32::MAX - 1)
    });
    b.add_file("etc/boot-fail-wait", wait.to_le_bytes().to_vec())?;
    if !c.bootorder.is_empty() {
        let mut order = c.bootorder.join("\n").into_bytes();
        order.push(0);
        b.add_file("bootorder", order)?;
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> FirmwareConfig {
        FirmwareConfig {
            cpus: 2,
            mem_size: 4 << 30,
            pci: PciRoot {
                ecam_base: Some(0xe000_0000),
                last_bus: 255,
                mmio32: vec![(0xc000_0000, 0xdfff_ffff)],
                mmio64: None,
                intx_gsis: [16, 17, 18, 19],
            },
            boot_fail_wait: Some(Duration::from_secs(2)),
            bootorder: vec!["/pci@i0cf8/*@4".into()],
        }
    }

    fn file<'a>(items: &'a BTreeMap<u16, Item>, name: &str) -> &'a [u8] {
        let dir = &items[&keys::FILE_DIR].data;
        let key = dir[4..]
            .chunks(64)
            .find(|e| e[8..].starts_with(name.as_bytes()) && e[8 + name.len()] == 0)
            .map(|e| u16::from_be_bytes([e[4], e[5]]))
            .unwrap_or_else(|| panic!("no file {name}"));
        &items[&key].data
    }

    #[test]
    fn e820_splits_around_the_hole_and_reserves_ecam() {
        let items = fw_cfg_items(&cfg()).unwrap();
        let map = file(&items, "etc/e820");
        let entries: Vec<(u64, u64, u32)> = map
            .chunks(20)
            .map(|e| {
                (
                    u64::from_le_bytes(e[0..8].try_into().unwrap()),
                    u64::from_le_bytes(e[8..16].try_into().unwrap()),
                    u32::from_le_bytes(e[16..20].try_into().unwrap()),
                )
            })
            .collect();
        assert_eq!(entries[0], (0, 0xc000_0000, 1));
        assert_eq!(entries[1], (1 << 32, 1 << 30, 1));
        assert!(entries.contains(&(0xe000_0000, 0x1000_0000, 2)));
    }

    #[test]
    fn counts_sizes_and_files() {
        let items = fw_cfg_items(&cfg()).unwrap();
        assert_eq!(items[&keys::NB_CPUS].data, 2u16.to_le_bytes());
        assert_eq!(items[&keys::RAM_SIZE].data, (4u64 << 30).to_le_bytes());
        assert_eq!(file(&items, "etc/boot-fail-wait"), 2000u32.to_le_bytes());
        assert_eq!(file(&items, "bootorder"), b"/pci@i0cf8/*@4\0");
        assert_eq!(file(&items, "etc/table-loader").len() % 128, 0);
        assert_eq!(&file(&items, "etc/acpi/rsdp")[..8], b"RSD PTR ");
    }

    #[test]
    fn default_wait_is_forever() {
        let mut c = cfg();
        c.boot_fail_wait = None;
        c.bootorder.clear();
        let items = fw_cfg_items(&c).unwrap();
        assert_eq!(file(&items, "etc/boot-fail-wait"), u32::MAX.to_le_bytes());
    }
}
