//! What a VM is made of, as the user asked for it, and the checks on it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::boot::KernelSpec;
use crate::memory::MIN_MEMORY_MIB;
use crate::outcome::{Blame, Fault};

/// A disk as the devices crate defines it (the image and how it is opened); the `--disk`
/// syntax is parsed here ([`parse_disk`]).
pub use devices::virtio::block::{DiskConfig, DiskFormat};

/// Most vCPUs a VM may have: xAPIC ids are 8 bits and 0xff is the broadcast id.
pub const MAX_VCPUS: usize = 254;
/// Most guest memory hvprof accepts, in MiB (1 TiB).
pub const MAX_MEMORY_MIB: u64 = 1 << 20;

/// Where COM1's output goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SerialOutput {
    /// The VMM's standard output.
    Stdout,
    /// A file, created or truncated.
    File(PathBuf),
    /// Discarded.
    Null,
    /// A buffer the caller reads while the VM runs.
    Buffer(SharedBuffer),
}

/// A byte buffer shared between the VM (writing) and its caller (reading).
#[derive(Clone, Debug, Default)]
pub struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl SharedBuffer {
    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl PartialEq for SharedBuffer {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedBuffer {}

impl std::io::Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Most disks a VM may have (PCI slots 2-31 of bus 0, with room left for other devices).
pub const MAX_DISKS: usize = 16;

/// Parses `IMAGE[,readonly][,snapshot][,format=raw|qcow2]` (`ro` is accepted for
/// `readonly`).
pub fn parse_disk(s: &str) -> Result<DiskConfig, ConfigError> {
    let mut parts = s.split(',');
    let path = parts.next().unwrap_or_default();
    if path.is_empty() {
        return Err(ConfigError::DiskOption(s.to_owned()));
    }
    let mut disk = DiskConfig::new(path, false);
    for opt in parts {
        match opt {
            "readonly" | "ro" => disk.readonly = true,
            "snapshot" => disk.snapshot = true,
            "format=raw" => disk.format = Some(DiskFormat::Raw),
            "format=qcow2" => disk.format = Some(DiskFormat::Qcow2),
            _ => return Err(ConfigError::DiskOption(s.to_owned())),
        }
    }
    if disk.readonly && disk.snapshot {
        return Err(ConfigError::DiskReadonlySnapshot(s.to_owned()));
    }
    Ok(disk)
}

/// What firmware to boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirmwareSpec {
    /// The ROM (SeaBIOS `bios.bin`) or, with `vars`, the pflash CODE image (`OVMF_CODE.fd`).
    pub path: PathBuf,
    /// The writable pflash VARS image (a copy of `OVMF_VARS.fd`); its changes are written back.
    pub vars: Option<PathBuf>,
}

/// What the VM boots.
#[derive(Clone, Debug)]
pub enum BootSource {
    /// A kernel loaded by hvprof (PVH, multiboot, Linux), entered directly.
    Kernel(KernelSpec),
    /// Firmware started at the reset vector (SeaBIOS, OVMF).
    Firmware(FirmwareSpec),
}

/// A VM to run.
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// The kernel or firmware.
    pub boot: BootSource,
    /// Hyper-V enlightenments: None is the default (on for firmware boots, off for kernels).
    pub hyperv: Option<bool>,
    /// Firmware boot: how long SeaBIOS waits after "No bootable device" before it reboots
    /// (which ends the run); None waits forever, as QEMU's default.
    pub boot_fail_wait: Option<Duration>,
    /// Number of vCPUs.
    pub cpus: usize,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// COM1 output.
    pub serial: SerialOutput,
    /// Forward standard input to COM1.
    pub serial_input: bool,
    /// Log file for the 0x402 debug console; None discards it.
    pub debugcon: Option<PathBuf>,
    /// End the run after this long.
    pub timeout: Option<Duration>,
    /// How often the watchdog looks for a hung guest.
    pub watchdog_period: Duration,
    /// Disk images, one virtio-blk device each, in PCI slot order.
    pub disks: Vec<DiskConfig>,
    /// Whether each thread filters its system calls.
    pub seccomp: crate::seccomp::Seccomp,
    /// What ProfileTime's samples tick on; None: the sampler's (the thread's CPU time with
    /// the in-kernel sampler, the wall clock with kicks).
    pub clock: Option<crate::sampler::Clock>,
    /// How samples are taken (`--sampler`).
    pub sampler: crate::sampler::SamplerChoice,
}

impl VmConfig {
    /// A configuration with defaults: 1 vCPU, 256 MiB, serial on stdout.
    pub fn new(kernel: KernelSpec) -> Self {
        Self::with_boot(BootSource::Kernel(kernel))
    }

    /// A configuration with defaults that boots `boot`.
    pub fn with_boot(boot: BootSource) -> Self {
        VmConfig {
            boot,
            hyperv: None,
            boot_fail_wait: None,
            cpus: 1,
            memory_mib: 256,
            serial: SerialOutput::Stdout,
            serial_input: true,
            debugcon: None,
            timeout: None,
            watchdog_period: Duration::from_millis(500),
            disks: Vec::new(),
            seccomp: crate::seccomp::Seccomp::On,
            clock: None,
            sampler: crate::sampler::SamplerChoice::Auto,
        }
    }

    /// The file the VM boots: the kernel or the firmware.
    pub fn boot_image(&self) -> &std::path::Path {
        match &self.boot {
            BootSource::Kernel(k) => &k.kernel,
            BootSource::Firmware(f) => &f.path,
        }
    }

    /// The kernel, for a kernel boot.
    pub fn kernel(&self) -> Option<&KernelSpec> {
        match &self.boot {
            BootSource::Kernel(k) => Some(k),
            BootSource::Firmware(_) => None,
        }
    }

    /// Whether Hyper-V enlightenments are wanted (the host may still lack them).
    pub fn hyperv_wanted(&self) -> bool {
        self.hyperv
            .unwrap_or(matches!(self.boot, BootSource::Firmware(_)))
    }

    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cpus == 0 || self.cpus > MAX_VCPUS {
            return Err(ConfigError::Cpus(self.cpus));
        }
        if !(MIN_MEMORY_MIB..=MAX_MEMORY_MIB).contains(&self.memory_mib) {
            return Err(ConfigError::Memory(self.memory_mib));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::Timeout);
        }
        if self.disks.len() > MAX_DISKS {
            return Err(ConfigError::Disks(self.disks.len()));
        }
        if self.disks.iter().any(|d| d.path.as_os_str().is_empty()) {
            return Err(ConfigError::DiskOption(String::new()));
        }
        Ok(())
    }
}

/// A configuration value out of range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// vCPU count.
    #[error("--cpus must be between 1 and {MAX_VCPUS}, not {0}")]
    Cpus(usize),
    /// Memory size.
    #[error("--memory must be between {MIN_MEMORY_MIB} and {MAX_MEMORY_MIB} MiB, not {0}")]
    Memory(u64),
    /// Timeout.
    #[error("--timeout must be more than zero seconds")]
    Timeout,
    /// Too many disks.
    #[error("at most {MAX_DISKS} disks, not {0}")]
    Disks(usize),
    /// A malformed --disk value.
    #[error("--disk takes IMAGE[,readonly][,snapshot][,format=raw|qcow2], not {0:?}")]
    DiskOption(String),
    /// `readonly` and `snapshot` together.
    #[error(
        "--disk {0:?}: readonly and snapshot exclude each other (snapshot already keeps the \
         image unchanged; readonly refuses the guest's writes)"
    )]
    DiskReadonlySnapshot(String),
}

impl Blame for ConfigError {
    fn fault(&self) -> Fault {
        match self {
            ConfigError::Cpus(_)
            | ConfigError::Memory(_)
            | ConfigError::Timeout
            | ConfigError::Disks(_)
            | ConfigError::DiskOption(_)
            | ConfigError::DiskReadonlySnapshot(_) => Fault::User,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> VmConfig {
        VmConfig::new(KernelSpec::from_file("k".into(), None, String::new()))
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(cfg().validate(), Ok(()));
    }

    #[test]
    fn zero_cpus_and_tiny_memory_are_refused() {
        let mut c = cfg();
        c.cpus = 0;
        assert_eq!(c.validate(), Err(ConfigError::Cpus(0)));
        let mut c = cfg();
        c.memory_mib = 0;
        assert_eq!(c.validate(), Err(ConfigError::Memory(0)));
        let mut c = cfg();
        c.timeout = Some(Duration::ZERO);
        assert_eq!(c.validate(), Err(ConfigError::Timeout));
    }

    #[test]
    fn disk_options_parse() {
        assert_eq!(
            parse_disk("a.img").unwrap(),
            DiskConfig {
                path: "a.img".into(),
                readonly: false,
                format: None,
                snapshot: false,
            }
        );
        let d = parse_disk("w.qcow2,snapshot,format=qcow2").unwrap();
        assert!(d.snapshot && !d.readonly && !d.writes_image());
        assert_eq!(d.format, Some(DiskFormat::Qcow2));
        assert_eq!(
            parse_disk("a,format=raw").unwrap().format,
            Some(DiskFormat::Raw)
        );
        assert!(parse_disk("a,format=vmdk").is_err());
        assert!(parse_disk("a,format=").is_err());
        assert_eq!(
            parse_disk("a,readonly,snapshot"),
            Err(ConfigError::DiskReadonlySnapshot(
                "a,readonly,snapshot".into()
            ))
        );
        assert!(parse_disk("/x/a.img,readonly").unwrap().readonly);
        assert!(parse_disk("a.img,ro").unwrap().readonly);
        assert!(parse_disk("a.img,rw").is_err());
        assert!(parse_disk("").is_err());
        assert!(parse_disk(",readonly").is_err());
        let mut c = cfg();
        c.disks = vec![parse_disk("a").unwrap(); MAX_DISKS + 1];
        assert_eq!(c.validate(), Err(ConfigError::Disks(MAX_DISKS + 1)));
    }
}
