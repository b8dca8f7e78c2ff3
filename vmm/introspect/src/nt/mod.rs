//! The Windows kernel from outside: finding ntoskrnl in guest memory and listing the modules
//! it has loaded, as debuggers and memory-forensics tools do, with nothing from the guest but
//! its memory.
//!
//! ntoskrnl is the PE image in kernel space that exports `PsLoadedModuleList`. It is found from
//! any address inside it (a kernel-mode sample, an IDT handler, MSR_LSTAR) by scanning down a
//! page at a time for its header ([`find_kernel`]); the export is the head of the loaded-module
//! list, a circular doubly linked list of `KLDR_DATA_TABLE_ENTRY` ([`walk_modules`]).
//!
//! The entry's layout is what 64-bit Windows 10 and 11 use (and every 64-bit Windows since
//! Vista, for the fields read here); docs/windows.md lists the offsets. hvprof has never read
//! a real Windows kernel's list: the tests lay the structures out as Windows does.

use crate::mem::Memory;
use crate::pe::{Image, PAGE};

mod modules;
pub use modules::{walk_modules, ListEnd, Module, ModuleList, MAX_MODULES};

/// The export that heads the loaded-module list.
pub const MODULE_LIST_EXPORT: &str = "PsLoadedModuleList";

/// The Windows kernel image found in guest memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Its headers.
    pub image: Image,
    /// The address of `PsLoadedModuleList` (a LIST_ENTRY).
    pub module_list: u64,
}

/// Why no kernel was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// The address is in user space.
    #[error("{0:#x} is not a kernel-space address")]
    NotKernelSpace(u64),
    /// No image header lies within the scan below the address, or the one found does not
    /// cover it.
    #[error("no PE image holds {0:#x}")]
    NoImage(u64),
    /// The image holding the address does not export `PsLoadedModuleList`.
    #[error("the image at {0:#x} does not export PsLoadedModuleList")]
    NotTheKernel(u64),
}

impl Kernel {
    /// `image` as the kernel, if it lies in kernel space and exports `PsLoadedModuleList`.
    pub fn of(mem: &mut dyn Memory, image: &Image) -> Option<Kernel> {
        if image.base >> 63 == 0 {
            return None;
        }
        let module_list = image.export(mem, MODULE_LIST_EXPORT)?;
        Some(Kernel {
            image: *image,
            module_list,
        })
    }

    /// Every module on the kernel's loaded-module list, ntoskrnl itself first.
    pub fn modules(&self, mem: &mut dyn Memory) -> ModuleList {
        walk_modules(mem, self.module_list, MAX_MODULES)
    }
}

/// The kernel holding `addr`, found by scanning down from its page for an image header, at
/// most `scan_limit` bytes. Unreadable pages are passed over: a kernel's discardable sections
/// may be unmapped while its header is not.
pub fn find_kernel(mem: &mut dyn Memory, addr: u64, scan_limit: u64) -> Result<Kernel, FindError> {
    if addr >> 63 == 0 {
        return Err(FindError::NotKernelSpace(addr));
    }
    let top = addr & !(PAGE - 1);
    let floor = top.saturating_sub(scan_limit);
    let mut page = top;
    while page >= floor {
        // Two bytes tell most pages apart from a header without reading the whole of one.
        if mem.read_u16(page) == Ok(u16::from_le_bytes(*b"MZ")) {
            if let Ok(image) = Image::read(mem, page) {
                if !image.contains(addr) {
                    return Err(FindError::NoImage(addr));
                }
                return Kernel::of(mem, &image).ok_or(FindError::NotTheKernel(image.base));
            }
        }
        page = match page.checked_sub(PAGE) {
            Some(below) => below,
            None => break,
        };
    }
    Err(FindError::NoImage(addr))
}

#[cfg(test)]
mod tests;
