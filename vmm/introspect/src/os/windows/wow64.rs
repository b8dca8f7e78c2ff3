//! WOW64: a 32-bit process's own loader list, beside its 64-bit one.
//!
//! A 32-bit process on 64-bit Windows has two PEBs. The 64-bit one (`EPROCESS.Peb`) lists the
//! executable and the 64-bit DLLs WOW64 itself runs on (ntdll.dll, wow64.dll, wow64win.dll,
//! wow64cpu.dll); the 32-bit one lists the executable again and its x86 DLLs (from
//! `C:\Windows\SysWOW64`). Its address is in the `EPROCESS`:
//!
//! - `WoW64Process` (Windows 10 builds from about 2016 on, and 11): a pointer to an
//!   `_EWOW64PROCESS` whose `Peb` member, at offset 0 in every public ntkrnlmp symbol table
//!   looked at, is the 32-bit PEB ([`EWOW64PROCESS_PEB`]); NULL for a 64-bit process.
//! - `Wow64Process` (earlier builds, a `PVOID`): taken as the 32-bit PEB itself.
//!
//! The 32-bit structures (`_PEB32`, `_PEB_LDR_DATA32`, `_LDR_DATA_TABLE_ENTRY32`,
//! `LIST_ENTRY32`, `UNICODE_STRING32`) are not in every ntkrnlmp.pdb, and not all of them in
//! any: their offsets here are the x86 ABI's, which have not moved since Windows XP for the
//! members read (see [`Ldr32`]). Public ntkrnlmp symbol tables that do carry `_PEB32` and
//! `_STRING32` agree with them (`Ldr` at 0x0c; `Length` at 0, `Buffer` at 4).
//!
//! The walk is [`walk32`]: 4-byte links, each 4-aligned and below 4 GiB, each entry's back
//! link checked, bounded like the 64-bit walk.

use std::ops::ControlFlow;

use super::ldr::{Module, ModuleList, MAX_USER_MODULES};
use crate::mem::Memory;
use crate::os::layout::WindowsLayout;
use crate::os::list::{walk32, ListEnd};
use crate::os::read::kernel_object;
use crate::os::ProcessFacts;

/// `_EWOW64PROCESS.Peb`: its offset.
pub const EWOW64PROCESS_PEB: u32 = 0;

/// The x86 offsets of what is read of a 32-bit process's loader data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ldr32;

impl Ldr32 {
    /// `_PEB32.Ldr`: after four BOOLEANs, `Mutant` and `ImageBaseAddress`.
    pub const PEB_LDR: u32 = 0x0c;
    /// `_PEB_LDR_DATA32.InLoadOrderModuleList`: after `Length`, `Initialized`, `SsHandle`.
    pub const IN_LOAD_ORDER_MODULE_LIST: u32 = 0x0c;
    /// `_LDR_DATA_TABLE_ENTRY32.InLoadOrderLinks`.
    pub const IN_LOAD_ORDER_LINKS: u32 = 0;
    /// `_LDR_DATA_TABLE_ENTRY32.DllBase`: after three `LIST_ENTRY32`s.
    pub const DLL_BASE: u32 = 0x18;
    /// `_LDR_DATA_TABLE_ENTRY32.EntryPoint`.
    pub const ENTRY_POINT: u32 = 0x1c;
    /// `_LDR_DATA_TABLE_ENTRY32.SizeOfImage`.
    pub const SIZE_OF_IMAGE: u32 = 0x20;
    /// `_LDR_DATA_TABLE_ENTRY32.FullDllName`: a `UNICODE_STRING32` (Length at 0, Buffer at 4).
    pub const FULL_DLL_NAME: u32 = 0x24;
    /// `_LDR_DATA_TABLE_ENTRY32.BaseDllName`.
    pub const BASE_DLL_NAME: u32 = 0x2c;
    /// The bytes of an entry read: up to the end of `BaseDllName`.
    const ENTRY_LEN: usize = 0x34;
}

/// A 32-bit user address: nonzero, below 4 GiB, 4-aligned.
fn user32(a: u64) -> bool {
    a != 0 && a >> 32 == 0 && a.is_multiple_of(4)
}

/// The 32-bit PEB of the process whose `_EPROCESS` is at `eprocess`, read through `kmem`:
/// None for a 64-bit process, for a layout without either member, or when what the member
/// points at is not a 32-bit user address (or cannot be read).
pub fn wow64_peb(kmem: &mut dyn Memory, layout: &WindowsLayout, eprocess: u64) -> Option<u64> {
    let e = &layout.eprocess;
    let (off, indirect) = match (e.wow64_process, e.wow64_peb32) {
        (Some(off), _) => (off, true),
        (None, Some(off)) => (off, false),
        (None, None) => return None,
    };
    let value = kmem.read_u64(eprocess.checked_add(u64::from(off))?).ok()?;
    if value == 0 {
        return None;
    }
    let peb = if indirect {
        let ewow64 = kernel_object("WoW64Process", value).ok()?;
        kmem.read_u64(ewow64 + u64::from(EWOW64PROCESS_PEB)).ok()?
    } else {
        value
    };
    user32(peb).then_some(peb)
}

/// Reads one `_LDR_DATA_TABLE_ENTRY32` (all of its fixed members in one read).
fn read_entry32(mem: &mut dyn Memory, entry: u64) -> Option<Module> {
    let mut b = [0u8; Ldr32::ENTRY_LEN];
    mem.read(entry, &mut b).ok()?;
    let u32_at = |off: u32| {
        let o = off as usize;
        u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
    };
    let name = |mem: &mut dyn Memory, off: u32| {
        let o = off as usize;
        let length = u16::from_le_bytes([b[o], b[o + 1]]);
        crate::os::text::utf16(mem, u64::from(u32_at(off + 4)), length)
    };
    Some(Module {
        entry,
        base: u64::from(u32_at(Ldr32::DLL_BASE)),
        size: u32_at(Ldr32::SIZE_OF_IMAGE),
        entry_point: u64::from(u32_at(Ldr32::ENTRY_POINT)),
        name: name(mem, Ldr32::BASE_DLL_NAME),
        path: name(mem, Ldr32::FULL_DLL_NAME),
    })
}

/// The modules on the 32-bit loader list of the process whose 32-bit PEB is at `peb32`, read
/// through `process_mem`: `PEB32.Ldr -> InLoadOrderModuleList`, at most `limit` entries (never
/// more than [`MAX_USER_MODULES`]). A PEB32 or `Ldr` that is not a 32-bit user address ends
/// the walk at once with [`ListEnd::BadLink`]; an unreadable one with [`ListEnd::Unreadable`].
pub fn wow64_modules(process_mem: &mut dyn Memory, peb32: u64, limit: usize) -> ModuleList {
    let none = |end| ModuleList {
        modules: Vec::new(),
        end,
    };
    if !user32(peb32) {
        return none(ListEnd::BadLink(peb32));
    }
    let ldr_at = peb32 + u64::from(Ldr32::PEB_LDR);
    let ldr = match process_mem.read_u32(ldr_at) {
        Ok(l) => u64::from(l),
        Err(_) => return none(ListEnd::Unreadable(ldr_at)),
    };
    if !user32(ldr) {
        return none(ListEnd::BadLink(ldr));
    }
    let mut modules = Vec::new();
    let end = walk32(
        process_mem,
        ldr + u64::from(Ldr32::IN_LOAD_ORDER_MODULE_LIST),
        Ldr32::IN_LOAD_ORDER_LINKS,
        limit.min(MAX_USER_MODULES),
        |mem, entry| match read_entry32(mem, entry) {
            Some(m) => {
                modules.push(m);
                ControlFlow::Continue(())
            }
            None => ControlFlow::Break(ListEnd::Unreadable(entry)),
        },
    );
    ModuleList { modules, end }
}

/// A process's loader lists: its PEB's and, under WOW64, its 32-bit PEB's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessModules {
    /// The 64-bit PEB's list (for a WOW64 process: the executable and WOW64's own DLLs).
    pub native: ModuleList,
    /// The 32-bit PEB's list, for a WOW64 process.
    pub wow64: Option<ModuleList>,
}

impl ProcessModules {
    /// Every module once: the 64-bit list's, then the 32-bit list's whose base the 64-bit list
    /// does not have (the executable is on both).
    pub fn modules(self) -> Vec<Module> {
        let mut all = self.native.modules;
        let native = all.len();
        for m in self.wow64.into_iter().flat_map(|l| l.modules) {
            if !all[..native].iter().any(|n| n.base == m.base) {
                all.push(m);
            }
        }
        all
    }
}

/// The user-mode modules of `process` (its PEB loader list, and its 32-bit PEB's when it runs
/// under WOW64), its `EPROCESS` read through `kmem` and its lists through `process_mem`, at
/// most `limit` entries a list.
pub fn process_modules(
    kmem: &mut dyn Memory,
    process_mem: &mut dyn Memory,
    layout: &WindowsLayout,
    process: &ProcessFacts,
    limit: usize,
) -> ProcessModules {
    let native = super::ldr::user_modules(process_mem, layout, process.peb, limit);
    let wow64 = wow64_peb(kmem, layout, process.key.object)
        .map(|peb32| wow64_modules(process_mem, peb32, limit));
    ProcessModules { native, wow64 }
}

#[cfg(test)]
mod tests;
