//! Loader lists: the kernel's `PsLoadedModuleList` and a process's
//! `PEB -> Ldr -> InLoadOrderModuleList`, both circular lists of `_LDR_DATA_TABLE_ENTRY`
//! (`KLDR_DATA_TABLE_ENTRY` in the kernel) walked with [`list::walk`]'s checks.
//!
//! [`list::walk`]: crate::os::list::walk

use std::ops::ControlFlow;

use crate::mem::{canonical, Memory};
use crate::os::layout::WindowsLayout;
use crate::os::list::{walk, ListEnd};
use crate::os::text::UnicodeOffsets;

/// Most entries of a kernel's module list walked, whatever the caller asks for.
pub const MAX_MODULES: usize = 4096;
/// Most entries of a process's loader list walked, whatever the caller asks for.
pub const MAX_USER_MODULES: usize = 1024;

/// One entry of a loader list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Where the entry is.
    pub entry: u64,
    /// DllBase: where the image is mapped.
    pub base: u64,
    /// SizeOfImage.
    pub size: u32,
    /// EntryPoint (0 when the entry's layout does not give it).
    pub entry_point: u64,
    /// BaseDllName (`ntoskrnl.exe`), if readable.
    pub name: Option<String>,
    /// FullDllName (`\SystemRoot\system32\ntoskrnl.exe`), if readable.
    pub path: Option<String>,
}

/// The modules a walk found, in list order, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleList {
    /// The entries read, in load order.
    pub modules: Vec<Module>,
    /// Why the walk stopped.
    pub end: ListEnd,
}

/// Where a loader entry keeps what is read of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LdrOffsets {
    /// `InLoadOrderLinks`.
    pub links: u32,
    /// `DllBase`.
    pub dll_base: u32,
    /// `SizeOfImage`.
    pub size_of_image: u32,
    /// `EntryPoint`, where known.
    pub entry_point: Option<u32>,
    /// `FullDllName`.
    pub full_dll_name: u32,
    /// `BaseDllName`.
    pub base_dll_name: u32,
    /// The `UNICODE_STRING` members.
    pub unicode: UnicodeOffsets,
}

impl LdrOffsets {
    /// `KLDR_DATA_TABLE_ENTRY` as 64-bit Windows lays it out (every release since Vista, for
    /// these members): the fallback when no layout from the kernel's PDB is known.
    pub const KLDR_X64: LdrOffsets = LdrOffsets {
        links: 0,
        dll_base: 0x30,
        size_of_image: 0x40,
        entry_point: Some(0x38),
        full_dll_name: 0x48,
        base_dll_name: 0x58,
        unicode: UnicodeOffsets::X64,
    };

    /// The offsets of `layout`'s `_LDR_DATA_TABLE_ENTRY` and `_UNICODE_STRING`.
    pub fn of(layout: &WindowsLayout) -> LdrOffsets {
        let e = &layout.ldr_data_table_entry;
        LdrOffsets {
            links: e.in_load_order_links,
            dll_base: e.dll_base,
            size_of_image: e.size_of_image,
            entry_point: None,
            full_dll_name: e.full_dll_name,
            base_dll_name: e.base_dll_name,
            unicode: UnicodeOffsets {
                length: layout.unicode_string.length,
                buffer: layout.unicode_string.buffer,
            },
        }
    }
}

/// Reads one entry's fixed members (all must be readable) and its names (each may not be).
fn read_entry(mem: &mut dyn Memory, entry: u64, o: &LdrOffsets) -> Option<Module> {
    let at = |off: u32| entry.checked_add(u64::from(off));
    let base = mem.read_u64(at(o.dll_base)?).ok()?;
    let size = mem.read_u32(at(o.size_of_image)?).ok()?;
    let entry_point = match o.entry_point {
        Some(off) => mem.read_u64(at(off)?).ok()?,
        None => 0,
    };
    let full = o.unicode.header(mem, at(o.full_dll_name)?)?;
    let short = o.unicode.header(mem, at(o.base_dll_name)?)?;
    Some(Module {
        entry,
        base,
        size,
        entry_point,
        name: crate::os::text::utf16(mem, short.1, short.0),
        path: crate::os::text::utf16(mem, full.1, full.0),
    })
}

/// Walks the loader list headed by the `LIST_ENTRY` at `head`, reading at most `limit`
/// entries laid out as `offsets` says.
pub fn walk_ldr(mem: &mut dyn Memory, head: u64, offsets: &LdrOffsets, limit: usize) -> ModuleList {
    let mut modules = Vec::new();
    let end = walk(
        mem,
        head,
        offsets.links,
        limit,
        |mem, entry| match read_entry(mem, entry, offsets) {
            Some(m) => {
                modules.push(m);
                ControlFlow::Continue(())
            }
            None => ControlFlow::Break(ListEnd::Unreadable(entry)),
        },
    );
    ModuleList { modules, end }
}

/// The user-mode modules of the process whose `_PEB` is at `peb`, read through `process_mem`
/// (that process's address space): `PEB.Ldr -> InLoadOrderModuleList`, the executable first.
/// At most `limit` entries (never more than [`MAX_USER_MODULES`]). A PEB or `Ldr` that is not a
/// user-space address ends the walk at once with [`ListEnd::BadLink`]; an unreadable one with
/// [`ListEnd::Unreadable`] (the loader may not have run yet).
pub fn user_modules(
    process_mem: &mut dyn Memory,
    layout: &WindowsLayout,
    peb: u64,
    limit: usize,
) -> ModuleList {
    let none = |end| ModuleList {
        modules: Vec::new(),
        end,
    };
    let user = |a: u64| a != 0 && a >> 63 == 0 && canonical(a) && a.is_multiple_of(8);
    if !user(peb) {
        return none(ListEnd::BadLink(peb));
    }
    let ldr_at = peb + u64::from(layout.peb.ldr);
    let ldr = match process_mem.read_u64(ldr_at) {
        Ok(l) => l,
        Err(_) => return none(ListEnd::Unreadable(ldr_at)),
    };
    if !user(ldr) {
        return none(ListEnd::BadLink(ldr));
    }
    let head = ldr + u64::from(layout.peb_ldr_data.in_load_order_module_list);
    walk_ldr(
        process_mem,
        head,
        &LdrOffsets::of(layout),
        limit.min(MAX_USER_MODULES),
    )
}
