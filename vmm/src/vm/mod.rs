//! Building a VM (KVM, memory, irqchip, devices, vCPUs) and running it to an outcome.

mod drain;
mod event_loop;
pub mod irq_routing;
pub mod platform;
mod run;
pub mod uptime;

use std::sync::{Arc, Mutex};

use kvm_bindings::{
    kvm_pit_config, kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY,
};
use kvm_ioctls::{Cap, Kvm, VmFd};
use profile_core::abi::{cpuid as abi_cpuid, DOORBELL_PORT_BASE};

use crate::profiler::{features_for, Profiler, ProfilerError};
use crate::sampler::mode::decide;
use crate::sampler::probe::{self, ProbeReport};
use crate::sampler::{selftest, Clock, SamplerMode, Sampling, SamplingError};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::acpi::{create_acpi_tables, AcpiError};
use crate::arch::cpuid::{vcpu_cpuid, Leaf};
use crate::arch::hyperv;
use crate::boot::{load_kernel, BootError, BootSetup, Protocol};
use crate::config::{BootSource, ConfigError, VmConfig};
use crate::firmware::boot::FirmwareBootError;
use crate::firmware::rom::ReadOnlySlot;
use crate::layout::{KVM_IDENTITY_MAP_ADDRESS, KVM_TSS_ADDRESS};
use crate::memory::{create_guest_memory, MemoryError};
use crate::outcome::{Blame, Fault, StopSignal};
use crate::signals::KickTable;
use crate::vcpu::doorbell::DoorbellPorts;
use crate::vcpu::observer::VcpuObserver;
use crate::vcpu::{configure_vcpu, SetupError, SharedState, Vcpu};
use devices::pci::{PciError, PciRoot};
use devices::serial::SerialDevice;
use devices::virtio::block::{AttachError, AttachedDisk, BlockAttachment};
use devices::BusError;

pub use run::{run, run_with, Controller, RunHooks, RunReport, VcpuSummary, VmControl};

/// Errors building or starting a VM.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// A bad configuration value.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// /dev/kvm could not be opened or lacks something required.
    #[error("cannot use KVM: {0}")]
    Kvm(&'static str, #[source] kvm_ioctls::Error),
    /// Guest memory.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The kernel could not be loaded.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// ACPI tables.
    #[error(transparent)]
    Acpi(#[from] AcpiError),
    /// The firmware: its image and memory, or its configuration (fw_cfg, ACPI tables for it).
    #[error(transparent)]
    Firmware(#[from] FirmwareBootError),
    /// A vCPU could not be configured.
    #[error("cannot configure vCPU {0}")]
    Vcpu(usize, #[source] SetupError),
    /// A device could not be placed on a bus.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// A disk could not be attached.
    #[error(transparent)]
    Disk(#[from] AttachError),
    /// The PCI root could not be created.
    #[error(transparent)]
    Pci(#[from] PciError),
    /// The profiler could not be set up.
    #[error(transparent)]
    Profiler(#[from] ProfilerError),
    /// A host-side profile could not start.
    #[error("cannot start the host-side profile")]
    HostProfile(#[source] crate::profiler::host_profiles::HostProfileError),
    /// The serial or debugcon output file.
    #[error(transparent)]
    OutputFile(files::stream::StreamError),
    /// The sampling clock asked for is unavailable here.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// `--sampler kernel` cannot run here.
    #[error(transparent)]
    Sampler(#[from] crate::sampler::mode::SamplerError),
    /// The signal handlers for kicks and sampling ticks.
    #[error(transparent)]
    Signals(#[from] crate::signals::HandlerError),
    /// A host resource (eventfd, thread, epoll) failed.
    #[error("cannot create {0}")]
    Host(&'static str, #[source] std::io::Error),
}

impl Blame for VmError {
    fn fault(&self) -> Fault {
        match self {
            VmError::Config(e) => e.fault(),
            VmError::Memory(e) => e.fault(),
            VmError::Boot(e) => e.fault(),
            VmError::Acpi(e) => e.fault(),
            VmError::Firmware(e) => e.fault(),
            VmError::Disk(e) => e.fault(),
            VmError::Pci(e) => e.fault(),
            VmError::HostProfile(e) => e.fault(),
            VmError::Sampling(e) => e.fault(),
            VmError::Sampler(e) => e.fault(),
            VmError::OutputFile(_) => Fault::User,
            VmError::Kvm(..)
            | VmError::Vcpu(..)
            | VmError::Bus(_)
            | VmError::Profiler(_)
            | VmError::Signals(_)
            | VmError::Host(..) => Fault::Host,
        }
    }
}

impl VmError {
    /// The process exit status for this error: 2 for what the user can fix, 12 for the host.
    pub fn exit_status(&self) -> i32 {
        self.fault().exit_status()
    }
}

/// A built VM whose vCPUs have not started yet.
pub struct Vm {
    vm_fd: Arc<VmFd>,
    boot: BootSetup,
    vcpus: Vec<Vcpu>,
    serial: Arc<Mutex<SerialDevice>>,
    stop: Arc<StopSignal>,
    profiler: Arc<Profiler>,
    pci: Arc<PciRoot>,
    disks: Vec<BlockAttachment>,
    /// The firmware's read-only memory; kept until the vCPUs have stopped.
    firmware_slot: Option<Arc<ReadOnlySlot>>,
}

/// The run's triggers: the sampler `config` asks for (its self-test decides `auto`; a fallback
/// to kicks is said in one line) on the events `report` found; `timeline`: a timeline records
/// from the start.
fn sampling_for(
    config: &VmConfig,
    report: &ProbeReport,
    timeline: bool,
) -> Result<Sampling, VmError> {
    let decision = decide(config.sampler, config.clock, timeline, selftest::run)?;
    if let Some(line) = decision.fallback_line() {
        log::warn!("{line}");
    }
    match decision.mode {
        SamplerMode::Kernel => Ok(Sampling::in_kernel(report)?),
        SamplerMode::Kick => Ok(Sampling::new(config.clock.unwrap_or(Clock::Wall), report)?),
    }
}

/// Why the Hyper-V enlightenments are off although `config` wants them, if they are: a
/// message for the user. None when they are on or not wanted.
pub fn hyperv_notice(config: &VmConfig) -> Option<String> {
    if !config.hyperv_wanted() {
        return None;
    }
    let has = Kvm::new().is_ok_and(|k| k.check_extension(Cap::Hyperv));
    (!has).then(|| {
        "Hyper-V enlightenments unavailable on this host (KVM_CAP_HYPERV absent); \
         the guest runs without them"
            .to_string()
    })
}

/// hvprof's CPUID leaves at 0x40000100 (the hypercall ABI's discovery), offering `features`.
fn hvprof_leaves(features: u32) -> [Leaf; 2] {
    let leaf = |function: u32, r: abi_cpuid::CpuidRegs| Leaf {
        function,
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    };
    [
        leaf(abi_cpuid::LEAF_BASE, abi_cpuid::base_leaf()),
        leaf(
            abi_cpuid::LEAF_INFO,
            abi_cpuid::info_leaf(DOORBELL_PORT_BASE, features),
        ),
    ]
}

impl Vm {
    /// Builds the VM described by `config`; `observer`, if any, watches every vCPU thread;
    /// `timeline`: a host profile with a timeline starts with the run.
    pub fn new(
        config: &VmConfig,
        observer: Option<Arc<dyn VcpuObserver>>,
        clock: crate::clock::RunClock,
        timeline: bool,
    ) -> Result<Self, VmError> {
        config.validate()?;
        let kvm = Kvm::new().map_err(|e| VmError::Kvm("open /dev/kvm", e))?;
        let vm_fd = kvm
            .create_vm()
            .map_err(|e| VmError::Kvm("KVM_CREATE_VM", e))?;
        let mem = create_guest_memory(config.memory_mib)?;
        register_memory(&vm_fd, &mem)?;
        vm_fd
            .set_tss_address(usize::try_from(KVM_TSS_ADDRESS).unwrap_or(0))
            .map_err(|e| VmError::Kvm("KVM_SET_TSS_ADDR", e))?;
        vm_fd
            .set_identity_map_address(KVM_IDENTITY_MAP_ADDRESS)
            .map_err(|e| VmError::Kvm("KVM_SET_IDENTITY_MAP_ADDR", e))?;
        vm_fd
            .create_irq_chip()
            .map_err(|e| VmError::Kvm("KVM_CREATE_IRQCHIP", e))?;
        let pit = kvm_pit_config {
            flags: KVM_PIT_SPEAKER_DUMMY,
            ..Default::default()
        };
        vm_fd
            .create_pit2(pit)
            .map_err(|e| VmError::Kvm("KVM_CREATE_PIT2", e))?;

        irq_routing::set_qemu_gsi_routing(&vm_fd)?;

        let (boot, firmware) = match &config.boot {
            BootSource::Kernel(kernel) => {
                let rsdp =
                    create_acpi_tables(&mem, config.cpus, &crate::acpi::PciRoot::platform())?;
                let boot = load_kernel(&mem, config.memory_mib << 20, kernel, rsdp)?;
                (boot, None)
            }
            BootSource::Firmware(spec) => {
                let parts = crate::firmware::boot::setup(&vm_fd, &mem, config, spec)?;
                let boot = BootSetup {
                    protocol: Protocol::Firmware,
                    entry: None,
                };
                (boot, Some(parts))
            }
        };
        let (firmware_slot, firmware_devices) = match firmware {
            Some(p) => (
                Some(Arc::new(p.slot)),
                Some(platform::FirmwareDevices {
                    fw_cfg: p.fw_cfg,
                    vars: p.vars,
                }),
            ),
            None => (None, None),
        };

        let vm_fd = Arc::new(vm_fd);
        let stop = Arc::new(StopSignal::new().map_err(|e| VmError::Host("an eventfd", e))?);
        let devices =
            platform::create_devices(&vm_fd, config, stop.clone(), &mem, firmware_devices)?;
        let kicks = Arc::new(KickTable::new(config.cpus));
        // Which perf events this host lets a vCPU thread sample, opened here as they will be
        // there; this decides the PMU sources the guest is offered.
        let report = probe::probe_host();
        if let Some(why) = report.hardware_summary() {
            log::debug!("{why}");
        }
        let sampling = Arc::new(sampling_for(config, &report, timeline)?);
        let features = features_for(&sampling);
        let profiler = Arc::new(Profiler::new(
            mem.clone(),
            vm_fd.clone(),
            kicks.clone(),
            sampling,
            Arc::new(report),
            clock,
        )?);
        if firmware_slot.is_some() {
            profiler.timeline().boot_firmware();
        }
        if let Some(observer) = &observer {
            profiler.observe_walks(observer.clone());
        }
        let shared = SharedState {
            pio: devices.pio,
            mmio: devices.mmio,
            stop: stop.clone(),
            mem: mem.clone(),
            firmware: firmware_slot.clone(),
            doorbell: DoorbellPorts::ABI,
            profiler: profiler.clone(),
            kicks,
            observer,
            seccomp: config.seccomp,
        };

        let supported = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(|e| VmError::Kvm("KVM_GET_SUPPORTED_CPUID", e))?;
        let sync_regs = vm_fd.check_extension(Cap::SyncRegs);
        let hyperv_on = config.hyperv_wanted() && kvm.check_extension(Cap::Hyperv);
        let mut hv_leaves: Option<Vec<Leaf>> = None;
        let count = u32::try_from(config.cpus).unwrap_or(u32::MAX);
        let mut vcpus = Vec::with_capacity(config.cpus);
        for index in 0..config.cpus {
            let id = u64::try_from(index).unwrap_or(u64::MAX);
            let fd = vm_fd
                .create_vcpu(id)
                .map_err(|e| VmError::Kvm("KVM_CREATE_VCPU", e))?;
            let apic_id = u32::try_from(index).unwrap_or(u32::MAX);
            let mut extra = hvprof_leaves(features).to_vec();
            if hyperv_on {
                if hv_leaves.is_none() {
                    let hv = hyperv::supported_hv_cpuid(&fd).map_err(|e| {
                        VmError::Host("the Hyper-V CPUID leaves (KVM_GET_SUPPORTED_HV_CPUID)", e)
                    })?;
                    let mut leaves = hyperv::hyperv_leaves(&hyperv::leaves_of(&hv), count);
                    leaves.extend(hyperv::moved_kvm_leaves(&hyperv::leaves_of(&supported)));
                    hv_leaves = Some(leaves);
                }
                extra.extend(hv_leaves.iter().flatten().copied());
                hyperv::enable_synic(&fd).map_err(|e| {
                    VmError::Vcpu(index, SetupError::Kvm("KVM_ENABLE_CAP(HYPERV_SYNIC2)", e))
                })?;
            }
            let cpuid = vcpu_cpuid(&supported, apic_id, count, &extra).map_err(|_| {
                VmError::Vcpu(
                    index,
                    SetupError::Kvm("CPUID table", kvm_ioctls::Error::new(libc::E2BIG)),
                )
            })?;
            let entry = if index == 0 { boot.entry } else { None };
            configure_vcpu(&fd, &cpuid, &mem, entry).map_err(|e| VmError::Vcpu(index, e))?;
            vcpus.push(Vcpu::new(index, fd, shared.clone(), sync_regs));
        }
        Ok(Vm {
            vm_fd,
            boot,
            vcpus,
            serial: devices.serial,
            stop,
            profiler,
            pci: devices.pci,
            disks: devices.disks,
            firmware_slot,
        })
    }

    /// How the kernel was booted.
    pub fn boot(&self) -> BootSetup {
        self.boot
    }

    /// PCI bus 0, for adding more functions (the ISA bridge) before the vCPUs start.
    pub fn pci(&self) -> &Arc<PciRoot> {
        &self.pci
    }

    /// Where each disk of the configuration was attached (slot and GSI, for the DSDT).
    pub fn disks(&self) -> impl Iterator<Item = AttachedDisk> + '_ {
        self.disks.iter().map(|d| d.at)
    }
}

fn register_memory(vm_fd: &VmFd, mem: &GuestMemoryMmap) -> Result<(), VmError> {
    for (slot, region) in mem.iter().enumerate() {
        let host = region
            .get_host_address(vm_memory::MemoryRegionAddress(0))
            .map_err(|_| {
                VmError::Kvm(
                    "guest memory host address",
                    kvm_ioctls::Error::new(libc::EINVAL),
                )
            })?;
        let region_desc = kvm_userspace_memory_region {
            slot: u32::try_from(slot).unwrap_or(u32::MAX),
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
            flags: 0,
        };
        // SAFETY: the region is a live mmap owned by `mem`, which the VM keeps (through the
        // vCPUs' shared state) for as long as the VM fd exists.
        unsafe { vm_fd.set_user_memory_region(region_desc) }
            .map_err(|e| VmError::Kvm("KVM_SET_USER_MEMORY_REGION", e))?;
    }
    Ok(())
}
