//! The devices of the PC platform hvprof provides, and the buses they sit on. Firmware boots
//! add fw_cfg and, for OVMF, the pflash VARS device.

use std::io::Write;
use std::sync::{Arc, Mutex};

use kvm_ioctls::VmFd;
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::VmError;
use crate::config::{SerialOutput, VmConfig};
use crate::firmware::pflash::Pflash;
use crate::layout::{
    ACPI_GPE0_BLK, ACPI_GPE0_LEN, ACPI_PM_BASE, ACPI_PM_LEN, ACPI_SCI_IRQ, FW_CFG_LEN, FW_CFG_PORT,
    PCI_WINDOWS, PORT92,
};
use crate::memory::low_ram_end;
use crate::outcome::StopSignal;
use devices::acpi_pm::{AcpiPm, Gpe0, SciLine};
use devices::cmos::{Cmos, CMOS_LEN, CMOS_PORT};
use devices::debug_exit::{DebugExit, DEBUG_EXIT_LEN, DEBUG_EXIT_PORT};
use devices::debugcon::{DebugCon, DEBUGCON_PORT};
use devices::fw_cfg::FwCfg;
use devices::i8042::{I8042, I8042_DATA_PORT, I8042_LEN};
use devices::pci::PciRoot;
use devices::reset::Port92;
use devices::serial::{SerialDevice, COM1_IRQ, COM1_LEN, COM1_PORT};
use devices::virtio::block::disk::check_distinct;
use devices::virtio::block::{attach_block, AttachError, BlockAttachment};
use devices::{Bus, BusError};

/// The buses and the devices other threads need to reach.
pub struct Devices {
    /// Port I/O bus.
    pub pio: Arc<Bus>,
    /// MMIO bus.
    pub mmio: Arc<Bus>,
    /// PCI bus 0 (host bridge, configuration space, BAR mapping).
    pub pci: Arc<PciRoot>,
    /// The virtio-blk devices, in `VmConfig::disks` order.
    pub disks: Vec<BlockAttachment>,
    /// COM1, for input from the event loop.
    pub serial: Arc<Mutex<SerialDevice>>,
}

/// The devices only a firmware boot has.
pub struct FirmwareDevices {
    /// fw_cfg.
    pub fw_cfg: FwCfg,
    /// The pflash VARS device and its guest-physical base (OVMF).
    pub vars: Option<(u64, Pflash)>,
}

/// A log written while the guest runs (`--serial FILE`, `--debugcon FILE`): see
/// [`files::stream::log`].
fn output_file(path: &std::path::Path) -> Result<Box<dyn Write + Send>, VmError> {
    Ok(Box::new(
        files::stream::log(path).map_err(VmError::OutputFile)?,
    ))
}

/// Puts the port devices that need nothing from KVM on `pio`: isa-debug-exit, the i8042, ACPI
/// PM (its SCI raised through `sci`) and GPE0, port 0x92, the CMOS (RAM of `mem` bytes, `cpus`
/// vCPUs) and the debug console (to `debugcon`, if given). The hypercall doorbell's ports are
/// on no bus: each vCPU answers them itself (`vcpu::doorbell`).
pub fn insert_port_devices(
    pio: &mut Bus,
    stop: &Arc<StopSignal>,
    sci: SciLine,
    mem: u64,
    cpus: usize,
    debugcon: Option<Box<dyn Write + Send>>,
) -> Result<(), BusError> {
    let low = low_ram_end(mem);
    pio.insert(
        "isa-debug-exit",
        Arc::new(Mutex::new(DebugExit::new(stop.clone()))),
        DEBUG_EXIT_PORT,
        DEBUG_EXIT_LEN,
    )?;
    pio.insert(
        "i8042",
        Arc::new(Mutex::new(I8042::new(stop.clone()))),
        I8042_DATA_PORT,
        I8042_LEN,
    )?;
    pio.insert(
        "acpi-pm",
        Arc::new(Mutex::new(AcpiPm::new(sci, stop.clone()))),
        ACPI_PM_BASE,
        ACPI_PM_LEN,
    )?;
    pio.insert(
        "acpi-gpe0",
        Arc::new(Mutex::new(Gpe0::default())),
        ACPI_GPE0_BLK,
        ACPI_GPE0_LEN,
    )?;
    pio.insert(
        "port92",
        Arc::new(Mutex::new(Port92::new(stop.clone()))),
        PORT92,
        1,
    )?;
    // The reset control register at 0xCF9 sits inside the PCI configuration-address dword:
    // the PCI root serves it, as QEMU's PIIX3 does.
    pio.insert(
        "cmos",
        Arc::new(Mutex::new(Cmos::new(
            low,
            mem - low,
            u8::try_from(cpus).unwrap_or(u8::MAX),
        ))),
        CMOS_PORT,
        CMOS_LEN,
    )?;
    pio.insert(
        "debugcon",
        Arc::new(Mutex::new(DebugCon::new(debugcon))),
        DEBUGCON_PORT,
        1,
    )?;
    Ok(())
}

/// Puts fw_cfg on `pio` and, for OVMF, the pflash VARS device on `mmio`.
pub fn insert_firmware_devices(
    pio: &mut Bus,
    mmio: &mut Bus,
    fw: FirmwareDevices,
) -> Result<(), BusError> {
    pio.insert(
        "fw_cfg",
        Arc::new(Mutex::new(fw.fw_cfg)),
        FW_CFG_PORT,
        FW_CFG_LEN,
    )?;
    if let Some((base, vars)) = fw.vars {
        let len = u64::try_from(vars.data().len()).unwrap_or(0);
        mmio.insert("pflash-vars", Arc::new(Mutex::new(vars)), base, len)?;
    }
    Ok(())
}

/// Creates the platform devices and wires COM1's interrupt; then the PCI root and a
/// virtio-blk device per disk.
pub fn create_devices(
    vm_fd: &Arc<VmFd>,
    config: &VmConfig,
    stop: Arc<StopSignal>,
    guest_mem: &GuestMemoryMmap,
    firmware: Option<FirmwareDevices>,
) -> Result<Devices, VmError> {
    let out: Box<dyn Write + Send> = match &config.serial {
        SerialOutput::Stdout => Box::new(std::io::stdout()),
        SerialOutput::File(p) => output_file(p)?,
        SerialOutput::Null => Box::new(std::io::sink()),
        SerialOutput::Buffer(b) => Box::new(b.clone()),
    };
    let irq = EventFd::new(EFD_NONBLOCK).map_err(|e| VmError::Host("an eventfd", e))?;
    vm_fd
        .register_irqfd(&irq, COM1_IRQ)
        .map_err(|e| VmError::Kvm("KVM_IRQFD for COM1", e))?;
    let serial = Arc::new(Mutex::new(
        SerialDevice::new(irq, out).map_err(|e| VmError::Host("an eventfd", e))?,
    ));
    let debugcon = match &config.debugcon {
        Some(p) => Some(output_file(p)?),
        None => None,
    };
    let mem = config.memory_mib << 20;

    let mut pio = Bus::new("port");
    pio.insert("com1", serial.clone(), COM1_PORT, COM1_LEN)?;
    let sci_fd = vm_fd.clone();
    let sci = Box::new(move |level: bool| {
        if let Err(e) = sci_fd.set_irq_line(ACPI_SCI_IRQ, level) {
            log::warn!("acpi-pm: cannot set the SCI line: {e}");
        }
    });
    insert_port_devices(&mut pio, &stop, sci, mem, config.cpus, debugcon)?;
    let mut mmio = Bus::new("MMIO");
    if let Some(fw) = firmware {
        insert_firmware_devices(&mut pio, &mut mmio, fw)?;
    }
    let pio = Arc::new(pio);
    let mmio = Arc::new(mmio);
    let pci = PciRoot::new(&pio, &mmio, PCI_WINDOWS, Some(stop))?;
    check_distinct(&config.disks).map_err(AttachError::from)?;
    let disks = config
        .disks
        .iter()
        .map(|d| attach_block(&pci, vm_fd, guest_mem, d))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Devices {
        pio,
        mmio,
        pci,
        disks,
        serial,
    })
}
