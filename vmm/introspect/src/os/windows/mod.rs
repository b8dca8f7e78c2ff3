//! The Windows kernel's processes and threads, read with the offsets of a [`WindowsLayout`].
//!
//! A CPU's `_KPCR` is at its kernel GS base; `_KPCR.Prcb.CurrentThread` is the running
//! `_ETHREAD`; its `Tcb.Process` is the owning process's `_KPROCESS`, embedded at `Pcb` in the
//! `_EPROCESS`. Every process is on `PsActiveProcessHead` through `ActiveProcessLinks`; a
//! process's user-mode modules are on its PEB's loader list ([`user_modules`]), and a 32-bit
//! process's also on its 32-bit PEB's ([`process_modules`]).
//!
//! Checks on what is read: kernel objects are canonical, 8-aligned kernel-half addresses;
//! thread and process ids are multiples of 4 below 2^32; the thread's `Cid.UniqueProcess` is its
//! process's `UniqueProcessId`. ImageFileName is at most 15 bytes, names at most 260 units.

use std::ops::ControlFlow;

use super::layout::WindowsLayout;
use super::list::{walk, ListEnd};
use super::read::{bytes_at, kernel_object, u64_at, CR3_ADDR_MASK};
use super::text::{self, UnicodeOffsets};
use super::{IdentifyError, Identity, ProcessFacts, ProcessKey, ThreadFacts, ThreadKey};
use crate::mem::{canonical, Memory};

mod ldr;
mod wow64;
pub use ldr::{
    user_modules, walk_ldr, LdrOffsets, Module, ModuleList, MAX_MODULES, MAX_USER_MODULES,
};
pub use wow64::{
    process_modules, wow64_modules, wow64_peb, Ldr32, ProcessModules, EWOW64PROCESS_PEB,
};

pub use super::{ProcessList, MAX_PROCESSES};
/// The System process's id.
pub const SYSTEM_PID: u64 = 4;

/// A Windows id: a multiple of 4 below 2^32.
fn id(what: &'static str, value: u64) -> Result<u64, IdentifyError> {
    if value.is_multiple_of(4) && value >> 32 == 0 {
        Ok(value)
    } else {
        Err(IdentifyError::Implausible { what, value })
    }
}

/// Checks that `base` is a `_KPCR`: `Self` points at it and `CurrentPrcb` at its `Prcb`.
pub fn check_kpcr(
    kmem: &mut dyn Memory,
    layout: &WindowsLayout,
    base: u64,
) -> Result<(), IdentifyError> {
    kernel_object("KPCR", base)?;
    let own = u64_at(kmem, base, layout.kpcr.self_)?;
    let prcb = u64_at(kmem, base, layout.kpcr.current_prcb)?;
    if own == base && prcb == base.wrapping_add(u64::from(layout.kpcr.prcb)) {
        Ok(())
    } else {
        Err(IdentifyError::BadPerCpuBase(base))
    }
}

/// Where a CPU whose `_KPCR` is at `kpcr` keeps its running thread's `_ETHREAD` pointer.
pub fn current_thread_slot(layout: &WindowsLayout, kpcr: u64) -> u64 {
    kpcr.wrapping_add(u64::from(layout.kpcr.prcb))
        .wrapping_add(u64::from(layout.kprcb.current_thread))
}

/// What identifies a thread and ties it to its process, read from its `_ETHREAD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadFields {
    /// Its identity.
    pub key: ThreadKey,
    /// `Cid.UniqueProcess`.
    pub process_id: u64,
    /// The owning `_EPROCESS` (from `Tcb.Process`, less `_EPROCESS.Pcb`).
    pub process: u64,
    /// The `PUNICODE_STRING` `ThreadName` (0 when unset or not in the layout).
    pub name_ptr: u64,
}

/// Reads the identity fields of the `_ETHREAD` at `ethread` (4 or 5 reads).
pub fn thread_fields(
    kmem: &mut dyn Memory,
    layout: &WindowsLayout,
    ethread: u64,
) -> Result<ThreadFields, IdentifyError> {
    let e = &layout.ethread;
    kernel_object("ETHREAD", ethread)?;
    let tid = id("thread id", u64_at(kmem, ethread, e.unique_thread)?)?;
    let process_id = id("process id", u64_at(kmem, ethread, e.unique_process)?)?;
    let created = u64_at(kmem, ethread, e.create_time)?;
    let kprocess = u64_at(
        kmem,
        ethread.wrapping_add(u64::from(e.tcb)),
        layout.kthread.process,
    )?;
    let process = kernel_object(
        "KTHREAD.Process",
        kprocess.wrapping_sub(u64::from(layout.eprocess.pcb)),
    )?;
    let name_ptr = match e.thread_name {
        Some(off) => u64_at(kmem, ethread, off)?,
        None => 0,
    };
    Ok(ThreadFields {
        key: ThreadKey {
            object: ethread,
            id: tid,
            created,
        },
        process_id,
        process,
        name_ptr,
    })
}

/// The thread's name from its `ThreadName` pointer (None when unset or unreadable).
pub fn thread_name(kmem: &mut dyn Memory, layout: &WindowsLayout, name_ptr: u64) -> Option<String> {
    if name_ptr == 0 || kernel_object("ThreadName", name_ptr).is_err() {
        return None;
    }
    unicode(layout).read(kmem, name_ptr)
}

/// True when the thread's `ThreadName` pointer names `name` (None: no name), read without
/// allocating.
pub fn thread_name_is(
    kmem: &mut dyn Memory,
    layout: &WindowsLayout,
    name_ptr: u64,
    name: Option<&str>,
) -> bool {
    if name_ptr == 0 || kernel_object("ThreadName", name_ptr).is_err() {
        return name.is_none();
    }
    unicode(layout).read_is(kmem, name_ptr, name)
}

fn unicode(layout: &WindowsLayout) -> UnicodeOffsets {
    UnicodeOffsets {
        length: layout.unicode_string.length,
        buffer: layout.unicode_string.buffer,
    }
}

/// Reads the process whose `_EPROCESS` is at `eprocess` (about 7 reads): its identity, name,
/// page-table roots and PEB. System (pid 4) and Idle (pid 0) are the kernel's own.
pub fn process(
    kmem: &mut dyn Memory,
    layout: &WindowsLayout,
    eprocess: u64,
) -> Result<ProcessFacts, IdentifyError> {
    let e = &layout.eprocess;
    kernel_object("EPROCESS", eprocess)?;
    let pid = id("process id", u64_at(kmem, eprocess, e.unique_process_id)?)?;
    let created = u64_at(kmem, eprocess, e.create_time)?;
    let mut name = [0u8; 15];
    bytes_at(kmem, eprocess, e.image_file_name, &mut name)?;
    let mut cr3s = Vec::with_capacity(2);
    let dtb = u64_at(kmem, eprocess, e.directory_table_base)? & CR3_ADDR_MASK;
    if dtb != 0 {
        cr3s.push(dtb);
    }
    if let Some(off) = e.user_directory_table_base {
        let user = u64_at(kmem, eprocess, off)? & CR3_ADDR_MASK;
        if user != 0 && user != dtb {
            cr3s.push(user);
        }
    }
    let peb = u64_at(kmem, eprocess, e.peb)?;
    let peb = if peb >> 63 == 0 && canonical(peb) && peb.is_multiple_of(8) {
        peb
    } else {
        0
    };
    let mut name = text::fixed(&name);
    if pid == 0 && name.is_empty() {
        name = "Idle".to_string();
    }
    Ok(ProcessFacts {
        key: ProcessKey {
            object: eprocess,
            id: pid,
            created,
            space: 0,
        },
        name,
        path: None,
        cr3s,
        kernel: pid == 0 || pid == SYSTEM_PID,
        peb,
    })
}

/// The thread whose `_ETHREAD` is at `ethread` and its process, read in full; refused when the
/// thread's `Cid.UniqueProcess` is not its process's id.
pub fn identify(
    kmem: &mut dyn Memory,
    layout: &WindowsLayout,
    ethread: u64,
) -> Result<Identity, IdentifyError> {
    let t = thread_fields(kmem, layout, ethread)?;
    let process = process(kmem, layout, t.process)?;
    if process.key.id != t.process_id {
        return Err(IdentifyError::Implausible {
            what: "thread's process id",
            value: t.process_id,
        });
    }
    Ok(Identity {
        process,
        thread: ThreadFacts {
            key: t.key,
            name: thread_name(kmem, layout, t.name_ptr),
        },
    })
}

/// Every process on `PsActiveProcessHead` (ntoskrnl at `nt_base`), at most `limit` (never more
/// than [`MAX_PROCESSES`]). An entry whose fields fail their checks ends the walk.
pub fn processes(
    kmem: &mut dyn Memory,
    layout: &WindowsLayout,
    nt_base: u64,
    limit: usize,
) -> ProcessList {
    let head = nt_base.wrapping_add(u64::from(layout.symbols.ps_active_process_head));
    let mut out = Vec::new();
    let end = walk(
        kmem,
        head,
        layout.eprocess.active_process_links,
        limit.min(MAX_PROCESSES),
        |mem, eprocess| match process(mem, layout, eprocess) {
            Ok(p) => {
                out.push(p);
                ControlFlow::Continue(())
            }
            Err(IdentifyError::Unreadable(a)) => ControlFlow::Break(ListEnd::Unreadable(a)),
            Err(_) => ControlFlow::Break(ListEnd::BadLink(eprocess)),
        },
    );
    ProcessList {
        processes: out,
        end,
    }
}

#[cfg(test)]
mod tests;
