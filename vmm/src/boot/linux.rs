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
const XLF_KERNEL_64: u16 = 1;
const LOADER_TYPE_UNDEFINED: u8 = 0xff;
const KEEP_SEGMENTS_AND_LOADED_HIGH: u8 = 0x41;

/// True when the file carries the Linux setup header magic.
pub(super) fn is_bzimage(file: &[u8]) -> bool {
    file.get(0x202..0x206) == Some(HDRS_MAGIC.as_slice())
}

pub(super) fn boot(
    ctx: &LoadContext<'_>,
    file: &[u8],
    initrd: Option<(&Path, &[u8])>,
    cmdline: &str,
) -> Result<BootSetup, BootError> {
    let path = ctx.path.to_owned();
    let loaded = BzImage::load(
        ctx.mem,
        None,
        &mut Cursor::new(file),
        Some(GuestAddress(HIGH_MEMORY_START)),
    )
    .map_err(|e| BootError::Linux(path.clone(), e))?;
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
