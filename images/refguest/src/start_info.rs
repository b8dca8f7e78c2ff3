//! PVH `struct hvm_start_info` (Xen public/arch-x86/hvm/start_info.h) and the
//! kernel command line. Everything is copied into kernel memory at boot, before
//! the AP trampoline overwrites low memory.

use crate::sync::RacyCell;

pub const MAGIC: u32 = 0x336e_c578;
const E820_RAM: u32 = 1;
const CMDLINE_MAX: usize = 256;

#[repr(C)]
#[derive(Clone, Copy)]
struct RawStartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct MemmapEntry {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

/// What the kernel keeps from start_info.
pub struct StartInfo {
    pub version: u32,
    pub rsdp_paddr: u64,
    pub memmap_entries: u32,
    /// Whether [0x8000, 0x9000) lies in RAM per the memmap (true when no memmap).
    pub trampoline_is_ram: bool,
}

static CMDLINE: RacyCell<([u8; CMDLINE_MAX], usize)> = RacyCell::new(([0; CMDLINE_MAX], 0));
/// Module 0 (hvprof's `--initrd`): physical address and size, or (0, 0).
static MODULE: RacyCell<(u64, u64)> = RacyCell::new((0, 0));

/// `struct hvm_modlist_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ModlistEntry {
    paddr: u64,
    size: u64,
    cmdline_paddr: u64,
    reserved: u64,
}

/// Reads and validates start_info at physical address `paddr`.
pub fn parse(paddr: u64, trampoline: u64) -> Result<StartInfo, u32> {
    // SAFETY: the PVH loader passes the physical address of start_info in
    // EBX; physical memory below 4 GiB is identity mapped.
    let raw = unsafe { (paddr as *const RawStartInfo).read_unaligned() };
    if raw.magic != MAGIC {
        return Err(raw.magic);
    }
    if raw.cmdline_paddr != 0 {
        // SAFETY: single-threaded boot; nothing else touches CMDLINE yet.
        let (buf, len) = unsafe { &mut *CMDLINE.get() };
        let src = raw.cmdline_paddr as *const u8;
        while *len < CMDLINE_MAX {
            // SAFETY: the command line is a NUL-terminated string in guest RAM.
            let byte = unsafe { src.add(*len).read_volatile() };
            if byte == 0 {
                break;
            }
            buf[*len] = byte;
            *len += 1;
        }
    }
    if raw.nr_modules >= 1 && raw.modlist_paddr != 0 {
        // SAFETY: the loader describes `nr_modules` entries at modlist_paddr, in RAM below
        // 4 GiB; single-threaded boot, nothing else touches MODULE yet.
        unsafe {
            let m = (raw.modlist_paddr as *const ModlistEntry).read_unaligned();
            *MODULE.get() = (m.paddr, m.size);
        }
    }
    let mut entries = 0;
    let mut trampoline_is_ram = true;
    if raw.version >= 1 && raw.memmap_paddr != 0 {
        entries = raw.memmap_entries;
        trampoline_is_ram = (0..entries as usize).any(|i| {
            // SAFETY: the loader describes `memmap_entries` entries at memmap_paddr.
            let e = unsafe { (raw.memmap_paddr as *const MemmapEntry).add(i).read_unaligned() };
            e.kind == E820_RAM && e.addr <= trampoline && trampoline + 0x1000 <= e.addr + e.size
        });
    }
    Ok(StartInfo { version: raw.version, rsdp_paddr: raw.rsdp_paddr, memmap_entries: entries, trampoline_is_ram })
}

/// Module 0 as bytes, if the loader passed one. The kernel maps the first 1 GiB of physical
/// memory, where hvprof places modules; one outside it is treated as absent.
pub fn module() -> Option<&'static [u8]> {
    // SAFETY: written once during boot by `parse`, read-only afterwards.
    let (paddr, size) = unsafe { *MODULE.get() };
    if paddr == 0 || size == 0 || paddr.checked_add(size)? > 1 << 30 {
        return None;
    }
    // SAFETY: [paddr, paddr + size) is the module, in identity-mapped RAM below 1 GiB, and
    // nothing writes it after boot.
    Some(unsafe { core::slice::from_raw_parts(paddr as *const u8, size as usize) })
}

/// The kernel command line ("" if none).
pub fn cmdline() -> &'static str {
    // SAFETY: written once during boot by `parse`, read-only afterwards.
    let (buf, len) = unsafe { &*CMDLINE.get() };
    core::str::from_utf8(&buf[..*len]).unwrap_or("")
}

/// Value of `key=value` on the command line.
pub fn param(key: &str) -> Option<&'static str> {
    cmdline().split_ascii_whitespace().find_map(|word| {
        let (k, v) = word.split_once('=')?;
        (k == key).then_some(v)
    })
}

/// Numeric parameter (decimal or 0x-prefixed hex) with a default.
pub fn param_u64(key: &str, default: u64) -> u64 {
    param(key)
        .and_then(|v| match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        })
        .unwrap_or(default)
}
