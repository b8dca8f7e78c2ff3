//! Multiboot v1 boot: loads the kernel (a.out kludge or ELF program headers) and writes the
//! multiboot information block the way QEMU's `-kernel` does: the command line is the kernel
//! path followed by the arguments, the initrd is module 0 named by its path.

use std::path::Path;

use super::elf;
use super::image::LoadContext;
use super::multiboot::{info, Header, BOOTLOADER_MAGIC};
use super::{BootError, BootSetup, EntryPoint, Protocol};
use crate::layout::{BOOT_INFO_START, EBDA_START, HIGH_MEMORY_START};
use crate::memory::{low_ram_end, memory_map};

const MODS_START: u64 = BOOT_INFO_START + 0x60;
const MMAP_START: u64 = BOOT_INFO_START + 0x80;
const LOADER_NAME_START: u64 = BOOT_INFO_START + 0x380;
const MODULE_STRING_START: u64 = BOOT_INFO_START + 0x400;
const MODULE_STRING_MAX: usize = 0xc00;

pub(super) fn boot(
    ctx: &LoadContext<'_>,
    file: &[u8],
    header: &Header,
    initrd: Option<(&Path, &[u8])>,
    cmdline: &str,
) -> Result<BootSetup, BootError> {
    let (entry, kernel_end) = match header.aout {
        Some(a) => {
            let end = u64::from(a.load_addr) + a.load_size as u64 + u64::from(a.bss_size);
            ctx.check_kernel_range(u64::from(a.load_addr), end - u64::from(a.load_addr))?;
            ctx.write(
                u64::from(a.load_addr),
                &file[a.file_offset..a.file_offset + a.load_size],
            )?;
            ctx.zero(
                u64::from(a.load_addr) + a.load_size as u64,
                u64::from(a.bss_size),
            )?;
            (u64::from(a.entry), end)
        }
        None => {
            let img = elf::parse(file).map_err(|e| BootError::Elf(ctx.path.to_owned(), e))?;
            let end = ctx.load_elf(file, &img)?;
            (img.entry, end)
        }
    };
    let eip = u32::try_from(entry).map_err(|_| BootError::NoEntryPoint(ctx.path.to_owned()))?;

    let full_cmdline = if cmdline.is_empty() {
        ctx.path.display().to_string()
    } else {
        format!("{} {}", ctx.path.display(), cmdline)
    };
    let cmdline_addr = ctx.write_cmdline(&full_cmdline)?;

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
        let start = ctx.place_initrd(data, kernel_end, None)?;
        let mut name = path.display().to_string().into_bytes();
        name.truncate(MODULE_STRING_MAX - 1);
        name.push(0);
        ctx.write(MODULE_STRING_START, &name)?;
        let mut module = [0u8; 16];
        put(&mut module, 0, to_u32(start));
        put(&mut module, 4, to_u32(start + data.len() as u64));
        put(&mut module, 8, to_u32(MODULE_STRING_START));
        ctx.write(MODS_START, &module)?;
        put(&mut mbi, info::MODS_COUNT, 1);
        put(&mut mbi, info::MODS_ADDR, to_u32(MODS_START));
        flags |= info::F_MODS;
    }

    let mut mmap = Vec::new();
    for e in memory_map(ctx.mem_size) {
        mmap.extend_from_slice(&20u32.to_le_bytes());
        mmap.extend_from_slice(&e.addr.to_le_bytes());
        mmap.extend_from_slice(&e.size.to_le_bytes());
        mmap.extend_from_slice(&(e.kind as u32).to_le_bytes());
    }
    ctx.write(MMAP_START, &mmap)?;
    put(&mut mbi, info::MMAP_LENGTH, to_u32(mmap.len() as u64));
    put(&mut mbi, info::MMAP_ADDR, to_u32(MMAP_START));
    ctx.write(LOADER_NAME_START, b"hvprof\0")?;
    put(&mut mbi, info::LOADER_NAME, to_u32(LOADER_NAME_START));
    put(&mut mbi, info::FLAGS, flags);
    ctx.write(BOOT_INFO_START, &mbi)?;

    Ok(BootSetup {
        protocol: Protocol::Multiboot,
        entry: Some(EntryPoint::Protected32 {
            eip,
            eax: BOOTLOADER_MAGIC,
            ebx: to_u32(BOOT_INFO_START),
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
