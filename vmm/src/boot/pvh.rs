//! PVH boot: the ELF's segments at their physical addresses, then `hvm_start_info` with the
//! memory map, command line, modules and RSDP; the vCPU enters at the note's 32-bit entry with
//! EBX pointing at the start info.

use std::path::Path;

use linux_loader::loader::elf::start_info::{
    hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info,
};
use vm_memory::ByteValued;

use super::elf::ElfImage;
use super::image::{segment_ranges, LoadContext};
use super::{BootError, BootSetup, EntryPoint, Protocol};
use crate::layout::{BOOT_INFO_START, CMDLINE_START};
use crate::memory::memory_map;

/// `hvm_start_info.magic`.
pub const START_INFO_MAGIC: u32 = 0x336e_c578;
const MODLIST_START: u64 = BOOT_INFO_START + 0x40;
const MEMMAP_START: u64 = BOOT_INFO_START + 0x80;
/// The start info, module list and memory map together.
const START_INFO_AREA: u64 = 0x1000;

pub(super) fn boot(
    ctx: &LoadContext<'_>,
    file: &[u8],
    img: &ElfImage,
    eip: u32,
    initrd: Option<(&Path, &[u8])>,
    cmdline: &str,
    rsdp: u64,
) -> Result<BootSetup, BootError> {
    let kernel_end = ctx.load_elf(file, img)?;
    ctx.check_clear(
        &segment_ranges(img),
        &[
            (BOOT_INFO_START, START_INFO_AREA, "the PVH start info"),
            (CMDLINE_START, cmdline.len() as u64 + 1, "the command line"),
        ],
    )?;
    let cmdline_paddr = ctx.write_cmdline(cmdline)?;

    let mut start_info = hvm_start_info {
        magic: START_INFO_MAGIC,
        version: 1,
        cmdline_paddr,
        rsdp_paddr: rsdp,
        ..Default::default()
    };
    if let Some((_, data)) = initrd {
        let paddr = ctx.place_initrd(data, kernel_end, None)?;
        let module = hvm_modlist_entry {
            paddr,
            size: data.len() as u64,
            ..Default::default()
        };
        ctx.write(MODLIST_START, module.as_slice())?;
        start_info.nr_modules = 1;
        start_info.modlist_paddr = MODLIST_START;
    }
    let map = memory_map(ctx.mem_size);
    for (i, e) in map.iter().enumerate() {
        let entry = hvm_memmap_table_entry {
            addr: e.addr,
            size: e.size,
            type_: e.kind as u32,
            reserved: 0,
        };
        let at = MEMMAP_START + (i * std::mem::size_of::<hvm_memmap_table_entry>()) as u64;
        ctx.write(at, entry.as_slice())?;
    }
    start_info.memmap_paddr = MEMMAP_START;
    start_info.memmap_entries = u32::try_from(map.len()).unwrap_or(u32::MAX);
    ctx.write(BOOT_INFO_START, start_info.as_slice())?;

    let ebx = u32::try_from(BOOT_INFO_START).expect("boot info is below 4 GiB");
    Ok(BootSetup {
        protocol: Protocol::Pvh,
        entry: Some(EntryPoint::Protected32 { eip, eax: 0, ebx }),
    })
}
