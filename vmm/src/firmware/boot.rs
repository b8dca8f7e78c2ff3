//! Setting up a firmware boot: the image's memory (ROM or pflash), the copy below 1 MiB and
//! fw_cfg's contents. The VM wires the parts into its buses and keeps the slot.

use kvm_ioctls::VmFd;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap};

use super::cfg::{fw_cfg_items, CfgError, FirmwareConfig};
use super::pflash::Pflash;
use super::rom::{copy_low, ReadOnlySlot};
use super::{load, FirmwareError, FirmwareImage, FirmwareSpec, FLASH_SECTOR};
use crate::acpi::PciRoot;
use crate::config::VmConfig;
use crate::outcome::{Blame, Fault};
use devices::fw_cfg::FwCfg;

/// Why a firmware boot could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum FirmwareBootError {
    /// The firmware image or its memory.
    #[error(transparent)]
    Image(#[from] FirmwareError),
    /// The firmware's configuration (fw_cfg, ACPI tables for it).
    #[error(transparent)]
    Config(#[from] CfgError),
}

impl Blame for FirmwareBootError {
    fn fault(&self) -> Fault {
        match self {
            FirmwareBootError::Image(e) => e.fault(),
            FirmwareBootError::Config(e) => e.fault(),
        }
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
) -> Result<FirmwareParts, FirmwareBootError> {
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
        pci: PciRoot::platform(),
        boot_fail_wait: config.boot_fail_wait,
        bootorder: Vec::new(),
    };
    let items = fw_cfg_items(&fw)?;
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
