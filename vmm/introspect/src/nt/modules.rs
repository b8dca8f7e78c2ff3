//! Walking the kernel's loaded-module list: `PsLoadedModuleList` heads a circular list of
//! `KLDR_DATA_TABLE_ENTRY` linked through their first field, `InLoadOrderLinks`.
//!
//! The walk is [`os::windows::walk_ldr`](crate::os::windows::walk_ldr) over
//! [`os::list::walk`](crate::os::list::walk): it follows Flink and checks that each entry's
//! Blink points back at the entry it came from, so a list that loops anywhere but through its
//! head, or that a write half-finished, ends at the first bad entry; a fixed bound ends the
//! rest. Names are read up to a fixed length and nothing is allocated by a size the guest chose.

use crate::mem::Memory;
pub use crate::os::list::ListEnd;
use crate::os::windows::{walk_ldr, LdrOffsets};
pub use crate::os::windows::{Module, ModuleList, MAX_MODULES};

/// Walks the list headed by the LIST_ENTRY at `head`, reading at most `limit` entries (and
/// never more than [`MAX_MODULES`]) laid out as 64-bit Windows lays out
/// `KLDR_DATA_TABLE_ENTRY` ([`LdrOffsets::KLDR_X64`]).
pub fn walk_modules(mem: &mut dyn Memory, head: u64, limit: usize) -> ModuleList {
    walk_ldr(mem, head, &LdrOffsets::KLDR_X64, limit.min(MAX_MODULES))
}
