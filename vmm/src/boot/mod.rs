//! Loading a kernel into guest memory and describing how its first vCPU enters it.
//!
//! Three boot protocols are recognised from the file's bytes: PVH ELF kernels (the Xen
//! `PHYS32_ENTRY` note), multiboot v1 kernels, and Linux bzImages.

pub use devices::bytes;
pub mod elf;
mod image;
mod linux;
mod mbinfo;
pub mod multiboot;
mod pvh;

use std::path::{Path, PathBuf};

use crate::outcome::{Blame, Fault};
use vm_memory::GuestMemoryMmap;

pub use image::{LoadContext, PlacementError};
pub use linux::BzImageError;

/// How the boot vCPU starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryPoint {
    /// 32-bit protected mode, paging off, flat segments (PVH and multiboot).
    Protected32 {
        /// Instruction pointer.
        eip: u32,
        /// EAX at entry.
        eax: u32,
        /// EBX at entry.
        ebx: u32,
    },
    /// 64-bit long mode with identity-mapped page tables (Linux's 64-bit boot protocol).
    Long64 {
        /// Instruction pointer.
        rip: u64,
        /// RSI at entry (the zero page).
        rsi: u64,
    },
}

/// The protocol a kernel was booted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// PVH ELF.
    Pvh,
    /// Multiboot v1.
    Multiboot,
    /// Linux bzImage.
    Linux,
    /// Firmware (SeaBIOS, OVMF) from the reset vector.
    Firmware,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Pvh => "PVH",
            Protocol::Multiboot => "multiboot",
            Protocol::Linux => "Linux bzImage",
            Protocol::Firmware => "firmware",
        })
    }
}

/// The result of loading a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootSetup {
    /// The protocol used.
    pub protocol: Protocol,
    /// How the boot vCPU enters the kernel; None: KVM's reset state (the reset vector).
    pub entry: Option<EntryPoint>,
}

/// What to boot.
#[derive(Clone, Debug)]
pub struct KernelSpec {
    /// The kernel file (for an embedded kernel, the name used in messages).
    pub kernel: PathBuf,
    /// The kernel's bytes when it is built into hvprof rather than read from `kernel`.
    pub embedded: Option<&'static [u8]>,
    /// An optional initrd / first module.
    pub initrd: Option<PathBuf>,
    /// The kernel command line.
    pub cmdline: String,
}

/// Errors while loading a kernel.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The kernel or initrd file was refused (not a regular file, above its size limit) or
    /// could not be read.
    #[error("{what}")]
    Input {
        /// The option that named the file (`--kernel`, `--initrd`).
        what: &'static str,
        /// Why.
        #[source]
        source: files::bounded::InputError,
    },
    /// The kernel is not in any format we boot.
    #[error(
        "{}: not a bootable kernel (no ELF, multiboot or bzImage header)",
        .0.display()
    )]
    NotBootable(PathBuf),
    /// An ELF file without a PVH note or multiboot header.
    #[error(
        "{}: ELF kernel has neither a PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY) nor a multiboot header",
        .0.display()
    )]
    NoEntryPoint(PathBuf),
    /// The ELF file is malformed.
    #[error("{}: malformed ELF kernel", .0.display())]
    Elf(PathBuf, #[source] elf::ElfError),
    /// The multiboot header is malformed.
    #[error("{}: malformed multiboot kernel", .0.display())]
    Multiboot(PathBuf, #[source] multiboot::MultibootError),
    /// A kernel, initrd or boot structure does not fit guest memory.
    #[error("{}: does not fit in guest memory", .0.display())]
    Placement(PathBuf, #[source] PlacementError),
    /// The command line is too long.
    #[error("kernel command line is {0} bytes; the limit is {max}", max = crate::layout::CMDLINE_MAX - 1)]
    CmdlineTooLong(usize),
    /// The command line has a NUL byte.
    #[error("kernel command line contains a NUL byte")]
    CmdlineNul,
    /// linux-loader refused the bzImage (its innermost message: linux-loader's errors repeat
    /// their source's text).
    #[error("{}: cannot load the bzImage: {}", .0.display(), .1)]
    Linux(PathBuf, String),
    /// The bzImage's setup header does not describe the file (truncated, or corrupt).
    #[error("{}: malformed bzImage: {}", .0.display(), .1)]
    BzImage(PathBuf, linux::BzImageError),
    /// The bzImage is too old for the 64-bit boot protocol.
    #[error("{}: the bzImage does not support the 64-bit boot protocol (needs 2.12+ with XLF_KERNEL_64)", .0.display())]
    LinuxTooOld(PathBuf),
}

impl Blame for BootError {
    /// Every kernel problem is the kernel file's or the command line's: the user's.
    fn fault(&self) -> Fault {
        match self {
            BootError::Input { .. }
            | BootError::NotBootable(_)
            | BootError::NoEntryPoint(_)
            | BootError::Elf(..)
            | BootError::Multiboot(..)
            | BootError::Placement(..)
            | BootError::CmdlineTooLong(_)
            | BootError::CmdlineNul
            | BootError::Linux(..)
            | BootError::BzImage(..)
            | BootError::LinuxTooOld(_) => Fault::User,
        }
    }
}

impl KernelSpec {
    /// A kernel read from a file.
    pub fn from_file(kernel: PathBuf, initrd: Option<PathBuf>, cmdline: String) -> Self {
        KernelSpec {
            kernel,
            embedded: None,
            initrd,
            cmdline,
        }
    }
}

/// Reads the file an option names, refusing it unread when it is not a regular file or is
/// above `limit` (files::bounded).
fn read_file(
    what: &'static str,
    path: &Path,
    limit: files::bounded::Limit,
) -> Result<Vec<u8>, BootError> {
    files::bounded::read(path, limit).map_err(|source| BootError::Input { what, source })
}

/// Loads `spec` into `mem` and returns how to enter it. `rsdp` is the ACPI RSDP address.
pub fn load_kernel(
    mem: &GuestMemoryMmap,
    mem_size: u64,
    spec: &KernelSpec,
    rsdp: u64,
) -> Result<BootSetup, BootError> {
    let kernel = match spec.embedded {
        Some(bytes) => bytes.to_vec(),
        None => read_file("--kernel", &spec.kernel, files::bounded::KERNEL)?,
    };
    let initrd = match &spec.initrd {
        Some(p) => Some((
            p.as_path(),
            read_file("--initrd", p, files::bounded::INITRD)?,
        )),
        None => None,
    };
    let initrd = initrd.as_ref().map(|(p, b)| (*p, b.as_slice()));
    let ctx = LoadContext {
        mem,
        mem_size,
        path: &spec.kernel,
    };
    load_image(&ctx, &kernel, initrd, &spec.cmdline, rsdp)
}

/// Loads the kernel image `kernel` (named `ctx.path` in errors), with `initrd` and
/// `cmdline`, by the first protocol it carries: PVH note, multiboot header, Linux setup
/// header.
pub fn load_image(
    ctx: &LoadContext<'_>,
    kernel: &[u8],
    initrd: Option<(&Path, &[u8])>,
    cmdline: &str,
    rsdp: u64,
) -> Result<BootSetup, BootError> {
    let path = || ctx.path.to_owned();
    if cmdline.len() >= crate::layout::CMDLINE_MAX {
        return Err(BootError::CmdlineTooLong(cmdline.len()));
    }
    if cmdline.contains('\0') {
        return Err(BootError::CmdlineNul);
    }
    if elf::is_elf(kernel) {
        let img = elf::parse(kernel).map_err(|e| BootError::Elf(path(), e))?;
        if let Some(eip) = img.pvh_entry {
            return pvh::boot(ctx, kernel, &img, eip, initrd, cmdline, rsdp);
        }
    }
    let mb = multiboot::find_header(kernel).map_err(|e| BootError::Multiboot(path(), e))?;
    if let Some(header) = mb {
        return mbinfo::boot(ctx, kernel, &header, initrd, cmdline);
    }
    if elf::is_elf(kernel) {
        return Err(BootError::NoEntryPoint(path()));
    }
    if linux::is_bzimage(kernel) {
        return linux::boot(ctx, kernel, initrd, cmdline);
    }
    Err(BootError::NotBootable(path()))
}
