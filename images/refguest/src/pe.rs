//! A PE32+ image passed as module 0: headers and sections copied to their RVAs in a static
//! buffer. An image based in the user PE window is mapped by every address space created
//! afterwards (`paging::create`, `scenario=pestacks`); one based in the kernel window is mapped
//! in kernel space (`paging::map_kernel_image`, `scenario=ntkernel`). Only what those need: an
//! x86-64 image linked /fixed (no relocations, no imports) whose base lies in a window.
//!
//! The buffer is the size of the kernel window (16 MiB), as large as a real ntoskrnl: the
//! stand-in kernels of tests/ntkernel.rs laid out at a real build's symbol RVAs reach 13 MiB,
//! nearly all of it a zero-filled section. The buffer is in `.bss`, which whoever loads this
//! kernel zeroes (hvprof on the host, as QEMU does): only the sections' file bytes are copied
//! here, for the guest's own kernel code is emulated on some hosts, where clearing 16 MiB
//! would take seconds.

use crate::cpu::Page;
use crate::sync::RacyCell;

/// Where a PE image may be mapped: the 2 MiB after the stack's page table.
pub const WINDOW: u64 = 0x4020_0000;
/// The user window's size.
pub const WINDOW_SIZE: u64 = 2 << 20;
/// Where a kernel-mode PE image may be mapped: the 16 MiB where 64-bit Windows' kernel-space
/// images begin.
pub const KERNEL_WINDOW: u64 = 0xffff_f800_0000_0000;
/// The kernel window's size.
pub const KERNEL_WINDOW_SIZE: u64 = 16 << 20;
/// Pages the buffer holds (16 MiB).
pub const MAX_PAGES: usize = (KERNEL_WINDOW_SIZE / 4096) as usize;

/// The laid-out image and where it goes.
pub struct Loaded {
    pub base: u64,
    pub pages: usize,
    pub entry: u64,
    /// Based in the kernel window.
    pub kernel: bool,
}

static IMAGE: RacyCell<[Page; MAX_PAGES]> = RacyCell::new([Page::ZERO; MAX_PAGES]);
static LOADED: RacyCell<Option<Loaded>> = RacyCell::new(None);

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Lays out `file` (call once, before any process is created).
pub fn load(file: &[u8]) -> Result<&'static Loaded, &'static str> {
    let bad = "module 0 is not a PE32+ x86-64 image linked /fixed into the PE window or the kernel window";
    let nt = u32_at(file, 0x3c).ok_or(bad)? as usize;
    if file.get(..2) != Some(b"MZ") || file.get(nt..nt + 4) != Some(b"PE\0\0") || u16_at(file, nt + 4) != Some(0x8664) {
        return Err(bad);
    }
    let sections = u16_at(file, nt + 6).ok_or(bad)? as usize;
    let opt = nt + 24;
    let opt_len = u16_at(file, nt + 20).ok_or(bad)? as usize;
    if u16_at(file, opt) != Some(0x20b) {
        return Err(bad);
    }
    let entry = u64::from(u32_at(file, opt + 16).ok_or(bad)?);
    let base = u64_at(file, opt + 24).ok_or(bad)?;
    let size = u64::from(u32_at(file, opt + 56).ok_or(bad)?);
    let headers = u32_at(file, opt + 60).ok_or(bad)? as usize;
    let pages = size.div_ceil(4096) as usize;
    let kernel = base >= KERNEL_WINDOW;
    let (window, window_size) = if kernel { (KERNEL_WINDOW, KERNEL_WINDOW_SIZE) } else { (WINDOW, WINDOW_SIZE) };
    if base % 4096 != 0 || base < window || size > window_size || base - window > window_size - size || pages > MAX_PAGES || entry >= size {
        return Err(bad);
    }
    // SAFETY: called once by the BSP during scenario setup, before any process runs and
    // before any address space maps the buffer.
    let image = unsafe { &mut *IMAGE.get() };
    // SAFETY: Page is 4096 plain bytes; the buffer is MAX_PAGES pages.
    let bytes = unsafe { core::slice::from_raw_parts_mut(image.as_mut_ptr().cast::<u8>(), MAX_PAGES * 4096) };
    let copy = |bytes: &mut [u8], to: usize, from: usize, len: usize| -> Result<(), &'static str> {
        let src = file.get(from..from.checked_add(len).ok_or(bad)?).ok_or(bad)?;
        bytes.get_mut(to..to + len).ok_or(bad)?.copy_from_slice(src);
        Ok(())
    };
    copy(bytes, 0, 0, headers.min(file.len()))?;
    let table = opt + opt_len;
    for i in 0..sections {
        let s = table + 40 * i;
        let virt_size = u32_at(file, s + 8).ok_or(bad)? as usize;
        let rva = u32_at(file, s + 12).ok_or(bad)? as usize;
        let raw_size = u32_at(file, s + 16).ok_or(bad)? as usize;
        let raw_at = u32_at(file, s + 20).ok_or(bad)? as usize;
        if rva.checked_add(virt_size).ok_or(bad)? as u64 > size {
            return Err(bad);
        }
        copy(bytes, rva, raw_at, raw_size.min(virt_size))?;
    }
    // SAFETY: as above: set once, before any reader.
    let loaded = unsafe { &mut *LOADED.get() };
    *loaded = Some(Loaded { base, pages, entry: base + entry, kernel });
    loaded.as_ref().ok_or(bad)
}

/// The loaded image and the physical address of its first page, if any.
pub fn loaded() -> Option<(&'static Loaded, u64)> {
    // SAFETY: written once by `load` before any address space is created; read-only after.
    let loaded = unsafe { (*LOADED.get()).as_ref()? };
    Some((loaded, IMAGE.get() as u64))
}
