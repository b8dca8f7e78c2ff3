//! Setting up a firmware boot: the image's memory (ROM or pflash), the copy below 1 MiB,
//! fw_cfg's contents, and QEMU's interrupt routing (the PIT's GSI 0 on IOAPIC pin 2).

use kvm_bindings::{
    kvm_irq_routing_entry, KvmIrqRouting, KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER,
    KVM_IRQCHIP_PIC_SLAVE, KVM_IRQ_ROUTING_IRQCHIP,
};
use kvm_ioctls::VmFd;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap};

use super::VmError;
use crate::acpi::PciRoot;
use crate::config::VmConfig;
use crate::devices::fw_cfg::FwCfg;
use crate::devices::pci::intx_gsi;
use crate::firmware::cfg::{fw_cfg_items, FirmwareConfig};
use crate::firmware::pflash::Pflash;
use crate::firmware::rom::{copy_low, ReadOnlySlot};
use crate::firmware::{load, FirmwareImage, FirmwareSpec, FLASH_SECTOR};
use crate::layout::{PCI_ECAM_SIZE, PCI_ECAM_START, PCI_MMIO32_WINDOWS};

/// The PCI root the firmware's tables describe, from the layout's constants.
pub fn pci_root() -> PciRoot {
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

/// What a firmware boot adds to the VM.
pub struct FirmwareParts {
    /// The ROM or pflash CODE slot; must outlive the vCPUs.
    pub slot: ReadOnlySlot,
    /// fw_cfg, for the port bus.
    pub fw_cfg: FwCfg,
    /// pflash VARS and its guest-physical base, for the MMIO bus.
    pub vars: Option<(u64, Pflash)>,
}

/// Maps `spec`'s image and builds fw_cfg for `config`.
pub fn setup(
    vm_fd: &VmFd,
    mem: &GuestMemoryMmap,
    config: &VmConfig,
    spec: &FirmwareSpec,
) -> Result<FirmwareParts, VmError> {
    let image = load(spec)?;
    let slot_index = u32::try_from(mem.num_regions()).unwrap_or(u32::MAX);
    let top = image.top();
    let top_len = u64::try_from(top.len()).unwrap_or(0);
    let top_gpa = crate::layout::FIRMWARE_END - top_len;
    let slot = ReadOnlySlot::new(vm_fd, slot_index, top_gpa, top)?;
    copy_low(mem, top)?;
    let what = image.describe();
    let start = image.start();
    let vars = match image {
        FirmwareImage::Rom { .. } => None,
        FirmwareImage::Pflash {
            vars, vars_file, ..
        } => {
            let sector = usize::try_from(FLASH_SECTOR).unwrap_or(4096);
            Some((start, Pflash::new(vars, sector, Some(vars_file))))
        }
    };
    let fw = FirmwareConfig {
        cpus: config.cpus,
        mem_size: config.memory_mib << 20,
        pci: pci_root(),
        boot_fail_wait: config.boot_fail_wait,
        bootorder: Vec::new(),
    };
    let items = fw_cfg_items(&fw)?;
    set_qemu_gsi_routing(vm_fd)?;
    log::info!(
        "{what} {} at {start:#x}..4 GiB, last 128 KiB copied to 0xe0000",
        spec.path.display()
    );
    Ok(FirmwareParts {
        slot,
        fw_cfg: FwCfg::new(items, mem.clone()),
        vars,
    })
}

/// QEMU's PC routing on the KVM irqchip: GSIs 0-15 on the PICs (except 2, the cascade),
/// GSI 0 on IOAPIC pin 2 (the MADT's IRQ 0 override) and GSIs 1-23 on their own pins.
pub fn qemu_gsi_routes() -> Vec<(u32, u32, u32)> {
    let mut routes = Vec::new();
    for gsi in 0..16u32 {
        if gsi == 2 {
            continue;
        }
        let (chip, pin) = if gsi < 8 {
            (KVM_IRQCHIP_PIC_MASTER, gsi)
        } else {
            (KVM_IRQCHIP_PIC_SLAVE, gsi - 8)
        };
        routes.push((gsi, chip, pin));
    }
    for gsi in 0..24u32 {
        match gsi {
            0 => routes.push((0, KVM_IRQCHIP_IOAPIC, 2)),
            2 => {}
            g => routes.push((g, KVM_IRQCHIP_IOAPIC, g)),
        }
    }
    routes
}

fn set_qemu_gsi_routing(vm_fd: &VmFd) -> Result<(), VmError> {
    let entries: Vec<kvm_irq_routing_entry> = qemu_gsi_routes()
        .into_iter()
        .map(|(gsi, irqchip, pin)| {
            let mut e = kvm_irq_routing_entry {
                gsi,
                type_: KVM_IRQ_ROUTING_IRQCHIP,
                ..Default::default()
            };
            e.u.irqchip.irqchip = irqchip;
            e.u.irqchip.pin = pin;
            e
        })
        .collect();
    let routing = KvmIrqRouting::from_entries(&entries)
        .map_err(|_| VmError::Kvm("KVM_SET_GSI_ROUTING", kvm_ioctls::Error::new(libc::E2BIG)))?;
    vm_fd
        .set_gsi_routing(&routing)
        .map_err(|e| VmError::Kvm("KVM_SET_GSI_ROUTING", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pit_goes_to_ioapic_pin_2_and_gsi_2_is_unrouted() {
        let r = qemu_gsi_routes();
        assert!(r.contains(&(0, KVM_IRQCHIP_IOAPIC, 2)));
        assert!(r.contains(&(0, KVM_IRQCHIP_PIC_MASTER, 0)));
        assert!(!r.iter().any(|&(g, _, _)| g == 2));
        assert!(r.contains(&(9, KVM_IRQCHIP_PIC_SLAVE, 1)));
        assert!(r.contains(&(23, KVM_IRQCHIP_IOAPIC, 23)));
    }

    #[test]
    fn pci_root_matches_the_layout() {
        let p = pci_root();
        assert_eq!(p.ecam_size(), PCI_ECAM_SIZE);
    }

    /// The DSDT's _PRT gives slot s, pin p (INTA = 0) the GSI intx_gsis[(s + p) % 4]; it must
    /// be the GSI the device raises (regression: the tables once said GSIs 16-19 while the
    /// devices raised 10 and 11).
    #[test]
    fn prt_agrees_with_the_devices_intx_routing() {
        let p = pci_root();
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
