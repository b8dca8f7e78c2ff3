//! The Windows kernel from outside: finding ntoskrnl in guest memory and listing the modules
//! it has loaded, as debuggers and memory-forensics tools do, with nothing from the guest but
//! its memory.
//!
//! ntoskrnl is the PE image in kernel space that exports `PsLoadedModuleList` ([`Kernel::of`]).
//! Its image is found like any other, from an address inside it by the [`ImageCache`]'s scan
//! down to its header (from a kernel-mode sample); the export is the head of the loaded-module
//! list, a circular doubly linked list of `KLDR_DATA_TABLE_ENTRY` ([`walk_modules`]).
//!
//! [`ImageCache`]: crate::ImageCache
//!
//! The entry's layout is what 64-bit Windows 10 and 11 use (and every 64-bit Windows since
//! Vista, for the fields read here); docs/windows.md lists the offsets. hvprof has never read
//! a real Windows kernel's list: the tests lay the structures out as Windows does. Once the
//! kernel's PDB has given a layout, [`Kernel::modules_with`] reads the entries at its offsets.

use crate::mem::Memory;
use crate::os::windows::{walk_ldr, LdrOffsets};
use crate::os::WindowsLayout;
use crate::pe::Image;

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

    /// The same, with the entries read at the offsets of `layout`'s `_LDR_DATA_TABLE_ENTRY`
    /// and `_UNICODE_STRING` (from the kernel's PDB) instead of the built-in ones; EntryPoint
    /// is not in the layout and reads as 0.
    pub fn modules_with(&self, mem: &mut dyn Memory, layout: &WindowsLayout) -> ModuleList {
        walk_ldr(mem, self.module_list, &LdrOffsets::of(layout), MAX_MODULES)
    }
}

#[cfg(test)]
mod tests;
