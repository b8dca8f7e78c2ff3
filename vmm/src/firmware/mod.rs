//! Booting from firmware instead of a kernel: SeaBIOS as a ROM, or OVMF as two pflash
//! devices (CODE read-only, VARS writable and persisted to the `--vars` file), both ending at
//! 4 GiB with their last 128 KiB also copied below 1 MiB, and the boot vCPU starting at the
//! architectural reset vector (KVM's default vCPU state: CS:IP F000:FFF0, CS base 0xFFFF0000).
//!
//! ```text
//! ROM:     [4 GiB - rom_size, 4 GiB)                      read-only memory slot
//! pflash:  [4 GiB - code - vars, 4 GiB - code)  VARS      MMIO (CFI flash commands)
//!          [4 GiB - code, 4 GiB)                 CODE      read-only memory slot
//! both:    [0xE0000, 0x100000)  a copy of the image's last 128 KiB, as writable RAM
//! ```
//!
//! As QEMU's `pc_system_firmware_init`: a writable RAM copy rather than an isa-bios ROM
//! alias, which is what SeaBIOS makes of it anyway once it has shadowed itself.
//!
//! Here: the image checks ([`load`]), its read-only memory and the low copy ([`rom`]), the
//! flash for OVMF's VARS ([`pflash`]), what fw_cfg tells the firmware ([`cfg`]), and the
//! parts a firmware boot adds to a VM, built from all of those ([`boot`]). The fw_cfg device
//! itself is `devices::fw_cfg`; the ACPI tables it carries are `acpi::tables`.

pub mod boot;
pub mod cfg;
pub mod pflash;
pub mod rom;

use std::fs::File;
use std::path::{Path, PathBuf};

pub use crate::config::FirmwareSpec;
use crate::layout::{FIRMWARE_END, FIRMWARE_MAX_SIZE, ISA_BIOS_SIZE};
use crate::outcome::{Blame, Fault};

/// The image sizes a ROM must be a multiple of (as QEMU's `-bios`).
pub const ROM_GRANULE: u64 = 64 << 10;
/// The pflash sector size; CODE and VARS must be multiples of it.
pub const FLASH_SECTOR: u64 = 4 << 10;

/// A firmware file hvprof cannot use.
#[derive(Debug, thiserror::Error)]
pub enum FirmwareError {
    /// The file was refused (not a regular file, above the size limit) or cannot be read
    /// (or, for VARS, opened for writing).
    #[error("{what}")]
    Input {
        /// The option that named the file (`--firmware`, `--vars`).
        what: &'static str,
        /// Why.
        #[source]
        source: files::bounded::InputError,
    },
    /// The size is not one hvprof can map.
    #[error("firmware {}: {size} bytes; {expected}", .path.display())]
    Size {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// What is needed.
        expected: String,
    },
    /// CODE and VARS do not fit below 4 GiB together.
    #[error("firmware: CODE ({code} bytes) and VARS ({vars} bytes) exceed the {FIRMWARE_MAX_SIZE}-byte flash area")]
    TooLarge {
        /// CODE size.
        code: u64,
        /// VARS size.
        vars: u64,
    },
    /// The host refused the memory for the image.
    #[error("cannot map the firmware image")]
    Map(#[source] std::io::Error),
    /// KVM refused the memory slot.
    #[error("cannot register the firmware's read-only memory slot (KVM_MEM_READONLY)")]
    Slot(#[source] kvm_ioctls::Error),
    /// The host's KVM cannot map read-only memory.
    #[error("this host's KVM lacks KVM_CAP_READONLY_MEM, needed to map firmware")]
    NoReadonlyMem,
    /// Writing the low BIOS copy into guest RAM failed.
    #[error("cannot copy the firmware below 1 MiB")]
    LowCopy,
}

impl Blame for FirmwareError {
    fn fault(&self) -> Fault {
        match self {
            FirmwareError::Input { .. }
            | FirmwareError::Size { .. }
            | FirmwareError::TooLarge { .. } => Fault::User,
            FirmwareError::Map(_)
            | FirmwareError::Slot(_)
            | FirmwareError::NoReadonlyMem
            | FirmwareError::LowCopy => Fault::Host,
        }
    }
}

/// A checked firmware image.
#[derive(Debug)]
pub enum FirmwareImage {
    /// One read-only ROM.
    Rom {
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// OVMF-style pflash.
    Pflash {
        /// CODE bytes (read-only).
        code: Vec<u8>,
        /// VARS bytes as read at start.
        vars: Vec<u8>,
        /// The VARS file, open for writing back.
        vars_file: File,
        /// Its path, for messages.
        vars_path: PathBuf,
    },
}

impl FirmwareImage {
    /// The bytes the reset vector and the low copy come from (ROM or CODE).
    pub fn top(&self) -> &[u8] {
        match self {
            FirmwareImage::Rom { bytes } => bytes,
            FirmwareImage::Pflash { code, .. } => code,
        }
    }

    /// The first guest-physical address the firmware occupies.
    pub fn start(&self) -> u64 {
        match self {
            FirmwareImage::Rom { bytes } => FIRMWARE_END - len64(bytes),
            FirmwareImage::Pflash { code, vars, .. } => FIRMWARE_END - len64(code) - len64(vars),
        }
    }

    /// What kind of firmware this is, for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            FirmwareImage::Rom { .. } => "firmware ROM",
            FirmwareImage::Pflash { .. } => "pflash firmware",
        }
    }
}

fn len64(b: &[u8]) -> u64 {
    u64::try_from(b.len()).unwrap_or(u64::MAX)
}

/// Opens (read-write with `writable`) and reads the file the option `what` names: a FIFO or
/// device would block or never end, so only a regular file within the flash area's size is
/// read (files::bounded).
fn read(what: &'static str, path: &Path, writable: bool) -> Result<(Vec<u8>, File), FirmwareError> {
    let limit = files::bounded::FIRMWARE;
    let err = |source| FirmwareError::Input { what, source };
    let (file, size) = files::bounded::open(path, limit, writable).map_err(err)?;
    let bytes = files::bounded::read_from(&file, path, size, limit).map_err(err)?;
    Ok((bytes, file))
}

fn size_error(path: &Path, size: u64, expected: String) -> FirmwareError {
    FirmwareError::Size {
        path: path.to_owned(),
        size,
        expected,
    }
}

/// Checks a ROM's size: a non-zero multiple of 64 KiB, at least the 128 KiB copied below
/// 1 MiB, at most 16 MiB.
pub fn check_rom_size(path: &Path, size: u64) -> Result<(), FirmwareError> {
    if size < ISA_BIOS_SIZE || !size.is_multiple_of(ROM_GRANULE) || size > FIRMWARE_MAX_SIZE {
        return Err(size_error(
            path,
            size,
            format!(
                "a firmware ROM must be a multiple of 64 KiB from 128 KiB to {} MiB",
                FIRMWARE_MAX_SIZE >> 20
            ),
        ));
    }
    Ok(())
}

/// Checks pflash sizes: non-zero multiples of 4 KiB, CODE at least 128 KiB, together at most
/// 16 MiB.
pub fn check_pflash_sizes(
    code_path: &Path,
    code: u64,
    vars_path: &Path,
    vars: u64,
) -> Result<(), FirmwareError> {
    if code < ISA_BIOS_SIZE || !code.is_multiple_of(FLASH_SECTOR) {
        return Err(size_error(
            code_path,
            code,
            "a pflash CODE image must be a multiple of 4 KiB and at least 128 KiB".into(),
        ));
    }
    if vars == 0 || !vars.is_multiple_of(FLASH_SECTOR) {
        return Err(size_error(
            vars_path,
            vars,
            "a pflash VARS image must be a non-empty multiple of 4 KiB".into(),
        ));
    }
    if code + vars > FIRMWARE_MAX_SIZE {
        return Err(FirmwareError::TooLarge { code, vars });
    }
    Ok(())
}

/// Reads and checks the firmware `spec` names.
pub fn load(spec: &FirmwareSpec) -> Result<FirmwareImage, FirmwareError> {
    let (top, _) = read("--firmware", &spec.path, false)?;
    match &spec.vars {
        None => {
            check_rom_size(&spec.path, len64(&top))?;
            Ok(FirmwareImage::Rom { bytes: top })
        }
        Some(vars_path) => {
            let (vars, vars_file) = read("--vars", vars_path, true)?;
            check_pflash_sizes(&spec.path, len64(&top), vars_path, len64(&vars))?;
            Ok(FirmwareImage::Pflash {
                code: top,
                vars,
                vars_file,
                vars_path: vars_path.clone(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rom_sizes() {
        let p = Path::new("bios.bin");
        assert!(check_rom_size(p, 128 << 10).is_ok());
        assert!(check_rom_size(p, 256 << 10).is_ok());
        for bad in [0, 64 << 10, (128 << 10) + 1, 32 << 20] {
            let e = check_rom_size(p, bad).unwrap_err().to_string();
            assert!(e.contains("multiple of 64 KiB"), "{e}");
        }
    }

    #[test]
    fn pflash_sizes() {
        let (c, v) = (Path::new("CODE.fd"), Path::new("VARS.fd"));
        assert!(check_pflash_sizes(c, 0x37_c000, v, 0x8_4000).is_ok());
        assert!(check_pflash_sizes(c, 0x37_c001, v, 0x8_4000).is_err());
        assert!(check_pflash_sizes(c, 0x37_c000, v, 0).is_err());
        assert!(matches!(
            check_pflash_sizes(c, 15 << 20, v, 2 << 20),
            Err(FirmwareError::TooLarge { .. })
        ));
    }

    #[test]
    fn layout_ends_at_4g() {
        let rom = FirmwareImage::Rom {
            bytes: vec![0; 128 << 10],
        };
        assert_eq!(rom.start(), 0xfffe_0000);
    }

    #[test]
    fn missing_file_names_the_path() {
        let spec = FirmwareSpec {
            path: "/nonexistent/bios.bin".into(),
            vars: None,
        };
        let e = load(&spec).unwrap_err();
        assert_eq!(e.to_string(), "--firmware");
        let why = std::error::Error::source(&e).unwrap().to_string();
        assert_eq!(why, "cannot open /nonexistent/bios.bin");
        assert_eq!(e.fault(), Fault::User);
    }

    #[test]
    fn a_device_is_refused_unread_as_firmware_and_as_vars() {
        let code = std::env::temp_dir().join(format!("hvprof-fw-code-{}", std::process::id()));
        std::fs::write(&code, vec![0u8; 128 << 10]).unwrap();
        for (path, vars, what) in [
            (PathBuf::from("/dev/zero"), None, "--firmware"),
            (code.clone(), Some("/dev/zero".into()), "--vars"),
        ] {
            let e = load(&FirmwareSpec { path, vars }).unwrap_err();
            assert_eq!(e.to_string(), what);
            let why = std::error::Error::source(&e).unwrap().to_string();
            assert_eq!(why, "/dev/zero is a character device, not a regular file");
        }
        std::fs::remove_file(&code).unwrap();
    }
}
