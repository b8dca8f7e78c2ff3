//! Walking the kernel's loaded-module list: `PsLoadedModuleList` heads a circular list of
//! `KLDR_DATA_TABLE_ENTRY` linked through their first field, `InLoadOrderLinks`.
//!
//! The guest owns every link. The walk follows Flink and checks that each entry's Blink points
//! back at the entry it came from: a list that loops anywhere but through its head, or that a
//! write half-finished, breaks that check at the first bad entry. A fixed bound ends the rest.
//! Names are read up to a fixed length and nothing is allocated by a size the guest chose.

use crate::mem::{canonical, Memory};
use crate::pe::{le16, le32, le64};

/// Most entries walked, whatever the caller asks for.
pub const MAX_MODULES: usize = 4096;
/// Longest name kept, in UTF-16 code units.
const MAX_NAME_UNITS: usize = 260;

/// Offsets into a 64-bit KLDR_DATA_TABLE_ENTRY.
const FLINK: usize = 0x00;
const BLINK: usize = 0x08;
const DLL_BASE: usize = 0x30;
const ENTRY_POINT: usize = 0x38;
const SIZE_OF_IMAGE: usize = 0x40;
const FULL_DLL_NAME: usize = 0x48;
const BASE_DLL_NAME: usize = 0x58;
/// The bytes read of each entry: up to the end of BaseDllName.
const ENTRY_LEN: usize = BASE_DLL_NAME + 16;

/// One entry of the loaded-module list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Where the entry is.
    pub entry: u64,
    /// DllBase: where the image is mapped.
    pub base: u64,
    /// SizeOfImage.
    pub size: u32,
    /// EntryPoint.
    pub entry_point: u64,
    /// BaseDllName (`ntoskrnl.exe`), if readable.
    pub name: Option<String>,
    /// FullDllName (`\SystemRoot\system32\ntoskrnl.exe`), if readable.
    pub path: Option<String>,
}

/// How a walk of the list ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListEnd {
    /// Back at the head: every module is listed.
    Complete,
    /// An entry (or the head) could not be read.
    Unreadable(u64),
    /// A link is not canonical, not aligned, or its entry's Blink does not point back.
    BadLink(u64),
    /// The walk's bound was reached.
    Limit,
}

/// The modules a walk found, in list order, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleList {
    /// The entries read, in load order.
    pub modules: Vec<Module>,
    /// Why the walk stopped.
    pub end: ListEnd,
}

/// The UNICODE_STRING at `at` in `entry` (Length, MaximumLength, padding, Buffer), read up to
/// [`MAX_NAME_UNITS`]; control characters become U+FFFD.
fn unicode_string(mem: &mut dyn Memory, entry: &[u8], at: usize) -> Option<String> {
    let length = usize::from(le16(entry, at));
    let buffer = le64(entry, at + 8);
    let units = (length / 2).min(MAX_NAME_UNITS);
    if units == 0 || !canonical(buffer) {
        return None;
    }
    let mut bytes = [0u8; 2 * MAX_NAME_UNITS];
    let bytes = &mut bytes[..2 * units];
    mem.read(buffer, bytes).ok()?;
    let utf16 = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    let s: String = char::decode_utf16(utf16)
        .map(|c| match c {
            Ok(c) if !c.is_control() => c,
            _ => char::REPLACEMENT_CHARACTER,
        })
        .collect();
    Some(s)
}

/// Walks the list headed by the LIST_ENTRY at `head`, reading at most `limit` entries (and
/// never more than [`MAX_MODULES`]).
pub fn walk_modules(mem: &mut dyn Memory, head: u64, limit: usize) -> ModuleList {
    let limit = limit.min(MAX_MODULES);
    let mut modules = Vec::new();
    let end = (|| {
        let Ok(mut at) = mem.read_u64(head + FLINK as u64) else {
            return ListEnd::Unreadable(head);
        };
        let mut prev = head;
        loop {
            if at == head {
                return ListEnd::Complete;
            }
            if modules.len() == limit {
                return ListEnd::Limit;
            }
            if !canonical(at) || at % 8 != 0 {
                return ListEnd::BadLink(at);
            }
            let mut e = [0u8; ENTRY_LEN];
            if mem.read(at, &mut e).is_err() {
                return ListEnd::Unreadable(at);
            }
            if le64(&e, BLINK) != prev {
                return ListEnd::BadLink(at);
            }
            modules.push(Module {
                entry: at,
                base: le64(&e, DLL_BASE),
                size: le32(&e, SIZE_OF_IMAGE),
                entry_point: le64(&e, ENTRY_POINT),
                name: unicode_string(mem, &e, BASE_DLL_NAME),
                path: unicode_string(mem, &e, FULL_DLL_NAME),
            });
            prev = at;
            at = le64(&e, FLINK);
        }
    })();
    ModuleList { modules, end }
}
