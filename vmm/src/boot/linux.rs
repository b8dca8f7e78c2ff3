//! Linux bzImage boot through linux-loader: the protected-mode kernel at 1 MiB, a zero page
//! with the e820 map, command line and initrd, and the 64-bit entry at load address + 0x200.

use std::io::Cursor;
use std::path::Path;

use linux_loader::loader::bootparam::{boot_e820_entry, boot_params};
use linux_loader::loader::{BzImage, KernelLoader};
use vm_memory::{ByteValued, GuestAddress};

use super::image::LoadContext;
use super::{BootError, BootSetup, EntryPoint, Protocol};
use crate::layout::{CMDLINE_MAX, HIGH_MEMORY_START, ZERO_PAGE_START};
use crate::memory::memory_map;

const HDRS_MAGIC: &[u8; 4] = b"HdrS";
/// The boot sector's signature at 0x1fe.
const BOOT_FLAG: u16 = 0xaa55;
/// Boot protocol 2.04: syssize is 32 bits wide.
const VERSION_SYSSIZE_32: u16 = 0x0204;
/// Boot protocol 2.08: payload_offset and payload_length.
const VERSION_PAYLOAD: u16 = 0x0208;
const XLF_KERNEL_64: u16 = 1;
const LOADER_TYPE_UNDEFINED: u8 = 0xff;
const KEEP_SEGMENTS_AND_LOADED_HIGH: u8 = 0x41;

/// True when the file carries the Linux setup header magic.
pub(super) fn is_bzimage(file: &[u8]) -> bool {
    file.get(0x202..0x206) == Some(HDRS_MAGIC.as_slice())
}

/// A setup header that does not describe the file it is in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BzImageError {
    /// The boot sector signature is missing.
    #[error("boot_flag {0:#06x} is not 0xaa55")]
    BootFlag(u16),
    /// The setup code is longer than the file.
    #[error("setup_sects {sects}: the setup code ({setup} bytes) does not fit in the file ({len} bytes)")]
    Setup {
        /// The field (0 means 4).
        sects: u8,
        /// The setup code's length with the boot sector.
        setup: usize,
        /// The file's length.
        len: usize,
    },
    /// No protected-mode kernel.
    #[error("syssize 0: the bzImage has no protected-mode kernel")]
    NoKernel,
    /// The protected-mode kernel is longer than what follows the setup code: a truncated file.
    #[error(
        "syssize {syssize:#x}: the protected-mode kernel ({need} bytes) is longer than the \
         {have} bytes after the setup code (a truncated file?)"
    )]
    Truncated {
        /// The field, in 16-byte paragraphs.
        syssize: u32,
        /// The kernel's length in bytes.
        need: u64,
        /// The bytes after the setup code.
        have: usize,
    },
    /// The compressed payload lies outside the protected-mode kernel.
    #[error(
        "payload_offset {offset:#x} + payload_length {length:#x} lie outside the protected-mode \
         kernel ({kernel} bytes)"
    )]
    Payload {
        /// The field.
        offset: u32,
        /// The field.
        length: u32,
        /// The protected-mode kernel's length.
        kernel: u64,
    },
}

fn le16(file: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([file[at], file[at + 1]])
}

fn le32(file: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([file[at], file[at + 1], file[at + 2], file[at + 3]])
}

/// Checks that the setup header of the bzImage `file` (it carries the `HdrS` magic) describes
/// the file: the boot sector signature, the setup code and the protected-mode kernel
/// (`syssize`) within the file, and the compressed payload within the kernel. linux-loader
/// checks none of this: it loads whatever follows the setup code, so a truncated file boots
/// and faults in the decompressor.
pub(super) fn check_header(file: &[u8]) -> Result<(), BzImageError> {
    let len = file.len();
    // The boot sector (the header starts in it) must be there before any field is read.
    let setup_err = |sects, setup| BzImageError::Setup { sects, setup, len };
    if len < 512 {
        return Err(setup_err(file.get(0x1f1).copied().unwrap_or(0), 512));
    }
    let flag = le16(file, 0x1fe);
    if flag != BOOT_FLAG {
        return Err(BzImageError::BootFlag(flag));
    }
    let sects = file[0x1f1];
    let setup = (usize::from(if sects == 0 { 4 } else { sects }) + 1) * 512;
    // The setup code is at least 1 KiB: the whole setup header (up to 0x268) is inside it.
    if setup > len {
        return Err(setup_err(sects, setup));
    }
    let version = le16(file, 0x206);
    // syssize is 16 bits wide before protocol 2.04.
    let syssize = if version >= VERSION_SYSSIZE_32 {
        le32(file, 0x1f4)
    } else {
        u32::from(le16(file, 0x1f4))
    };
    if syssize == 0 {
        return Err(BzImageError::NoKernel);
    }
    let have = len - setup;
    let need = u64::from(syssize) * 16;
    if need > u64::try_from(have).unwrap_or(u64::MAX) {
        return Err(BzImageError::Truncated {
            syssize,
            need,
            have,
        });
    }
    if version >= VERSION_PAYLOAD {
        let (offset, length) = (le32(file, 0x248), le32(file, 0x24c));
        if u64::from(offset) + u64::from(length) > need {
            return Err(BzImageError::Payload {
                offset,
                length,
                kernel: need,
            });
        }
    }
    Ok(())
}

/// The innermost message of a linux-loader error: its errors print their source's text as
/// part of their own, so the chain would say it twice.
fn loader_message(e: &linux_loader::loader::Error) -> String {
    let mut inner: &dyn std::error::Error = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}

pub(super) fn boot(
    ctx: &LoadContext<'_>,
    file: &[u8],
    initrd: Option<(&Path, &[u8])>,
    cmdline: &str,
) -> Result<BootSetup, BootError> {
    let path = ctx.path.to_owned();
    check_header(file).map_err(|e| BootError::BzImage(path.clone(), e))?;
    let loaded = BzImage::load(
        ctx.mem,
        None,
        &mut Cursor::new(file),
        Some(GuestAddress(HIGH_MEMORY_START)),
    )
    .map_err(|e| BootError::Linux(path.clone(), loader_message(&e)))?;
    let mut hdr = loaded
        .setup_header
        .ok_or_else(|| BootError::LinuxTooOld(path.clone()))?;
    if hdr.version < 0x020c || hdr.xloadflags & XLF_KERNEL_64 == 0 {
        return Err(BootError::LinuxTooOld(path));
    }
    let kernel_end = loaded.kernel_load.0 + loaded.kernel_end;

    hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
    hdr.loadflags |= KEEP_SEGMENTS_AND_LOADED_HIGH;
    hdr.cmd_line_ptr = u32::try_from(ctx.write_cmdline(cmdline)?).expect("cmdline below 4 GiB");
    hdr.cmdline_size = u32::try_from(CMDLINE_MAX).unwrap_or(u32::MAX);
    if let Some((_, data)) = initrd {
        let limit = u64::from(hdr.initrd_addr_max) + 1;
        let addr = ctx.place_initrd(data, kernel_end, Some(limit))?;
        hdr.ramdisk_image = u32::try_from(addr).expect("initrd below initrd_addr_max");
        hdr.ramdisk_size = u32::try_from(data.len()).unwrap_or(u32::MAX);
    }

    let mut params = boot_params {
        hdr,
        ..Default::default()
    };
    let map = memory_map(ctx.mem_size);
    for (slot, e) in params.e820_table.iter_mut().zip(&map) {
        *slot = boot_e820_entry {
            addr: e.addr,
            size: e.size,
            r#type: e.kind as u32,
        };
    }
    params.e820_entries = u8::try_from(map.len().min(params.e820_table.len())).unwrap_or(0);
    ctx.write(ZERO_PAGE_START, params.as_slice())?;

    Ok(BootSetup {
        protocol: Protocol::Linux,
        entry: Some(EntryPoint::Long64 {
            rip: loaded.kernel_load.0 + 0x200,
            rsi: ZERO_PAGE_START,
        }),
    })
}

#[cfg(test)]
mod tests;
