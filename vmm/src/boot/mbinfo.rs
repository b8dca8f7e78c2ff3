//! Multiboot v1 boot: loads the kernel (a.out kludge or ELF program headers) anywhere in the
//! guest's RAM and writes the multiboot information the way QEMU's `-kernel` does: the command
//! line is the kernel path followed by the arguments, the initrd is module 0 named by its
//! path. The information (info block, module, memory map, names, command line) is one area:
//! at `BOOT_INFO_START` when the kernel leaves it free, else right after the kernel.

use std::path::Path;

use super::elf;
use super::image::{overlaps, segment_ranges, LoadContext, PlacementError};
use super::multiboot::{info, Header, BOOTLOADER_MAGIC};
use super::{BootError, BootSetup, EntryPoint, Protocol};
use crate::layout::{BOOT_INFO_START, EBDA_START, HIGH_MEMORY_START};
use crate::memory::{low_ram_end, memory_map};

// Offsets in the information area.
const MODS: u64 = 0x60;
const MMAP: u64 = 0x80;
const LOADER_NAME: u64 = 0x380;
const MODULE_STRING: u64 = 0x400;
const MODULE_STRING_MAX: usize = 0xc00;
const CMDLINE: u64 = 0x1000;

pub(super) fn boot(
    ctx: &LoadContext<'_>,
    file: &[u8],
    header: &Header,
    initrd: Option<(&Path, &[u8])>,
    cmdline: &str,
) -> Result<BootSetup, BootError> {
    let (entry, kernel_end, segments) = match header.aout {
        Some(a) => {
            let end = u64::from(a.load_addr) + a.load_size as u64 + u64::from(a.bss_size);
            let range = (u64::from(a.load_addr), end - u64::from(a.load_addr));
            ctx.check_kernel_range(range.0, range.1)?;
            ctx.write(
                u64::from(a.load_addr),
                &file[a.file_offset..a.file_offset + a.load_size],
            )?;
            ctx.zero(
                u64::from(a.load_addr) + a.load_size as u64,
                u64::from(a.bss_size),
            )?;
            (u64::from(a.entry), end.max(HIGH_MEMORY_START), vec![range])
        }
        None => {
            let img = elf::parse(file).map_err(|e| BootError::Elf(ctx.path.to_owned(), e))?;
            let end = ctx.load_elf(file, &img)?;
            (img.entry, end, segment_ranges(&img))
        }
    };
    let eip = u32::try_from(entry).map_err(|_| BootError::NoEntryPoint(ctx.path.to_owned()))?;

    let full_cmdline = if cmdline.is_empty() {
        ctx.path.display().to_string()
    } else {
        format!("{} {}", ctx.path.display(), cmdline)
    };
    let area_len = CMDLINE + full_cmdline.len() as u64 + 1;
    let clear = |at: u64| segments.iter().all(|&r| !overlaps(r, (at, area_len)));
    let base = if clear(BOOT_INFO_START) {
        BOOT_INFO_START
    } else {
        kernel_end.next_multiple_of(0x1000)
    };
    ctx.check_kernel_range(base, area_len).map_err(|_| {
        ctx.err(PlacementError::BootInfo {
            size: area_len,
            usual: BOOT_INFO_START,
            kernel_end,
        })
    })?;
    let cmdline_addr = base + CMDLINE;
    ctx.write_cmdline_at(cmdline_addr, &full_cmdline)?;
    let data_end = if base == BOOT_INFO_START {
        kernel_end
    } else {
        base + area_len
    };

    let mut mbi = vec![0u8; usize::try_from(info::SIZE).unwrap_or(88)];
    let mut flags = info::F_MEM | info::F_CMDLINE | info::F_MMAP | info::F_LOADER_NAME;
    put(&mut mbi, info::MEM_LOWER, to_u32(EBDA_START / 1024));
    put(
        &mut mbi,
        info::MEM_UPPER,
        to_u32((low_ram_end(ctx.mem_size) - HIGH_MEMORY_START) / 1024),
    );
    put(&mut mbi, info::CMDLINE, to_u32(cmdline_addr));

    if let Some((path, data)) = initrd {
        let start = ctx.place_initrd(data, data_end, None)?;
        let mut name = path.display().to_string().into_bytes();
        name.truncate(MODULE_STRING_MAX - 1);
        name.push(0);
        ctx.write(base + MODULE_STRING, &name)?;
        let mut module = [0u8; 16];
        put(&mut module, 0, to_u32(start));
        put(&mut module, 4, to_u32(start + data.len() as u64));
        put(&mut module, 8, to_u32(base + MODULE_STRING));
        ctx.write(base + MODS, &module)?;
        put(&mut mbi, info::MODS_COUNT, 1);
        put(&mut mbi, info::MODS_ADDR, to_u32(base + MODS));
        flags |= info::F_MODS;
    }

    let mut mmap = Vec::new();
    for e in memory_map(ctx.mem_size) {
        mmap.extend_from_slice(&20u32.to_le_bytes());
        mmap.extend_from_slice(&e.addr.to_le_bytes());
        mmap.extend_from_slice(&e.size.to_le_bytes());
        mmap.extend_from_slice(&(e.kind as u32).to_le_bytes());
    }
    ctx.write(base + MMAP, &mmap)?;
    put(&mut mbi, info::MMAP_LENGTH, to_u32(mmap.len() as u64));
    put(&mut mbi, info::MMAP_ADDR, to_u32(base + MMAP));
    ctx.write(base + LOADER_NAME, b"hvprof\0")?;
    put(&mut mbi, info::LOADER_NAME, to_u32(base + LOADER_NAME));
    put(&mut mbi, info::FLAGS, flags);
    ctx.write(base, &mbi)?;

    Ok(BootSetup {
        protocol: Protocol::Multiboot,
        entry: Some(EntryPoint::Protected32 {
            eip,
            eax: BOOTLOADER_MAGIC,
            ebx: to_u32(base),
        }),
    })
}

fn put(buf: &mut [u8], off: u64, v: u32) {
    let off = usize::try_from(off).expect("small offset");
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Addresses handed to a 32-bit multiboot kernel are below 4 GiB by construction (low RAM).
fn to_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
