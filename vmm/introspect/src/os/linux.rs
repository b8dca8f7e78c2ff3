//! The Linux kernel's tasks, read with the offsets of a [`LinuxLayout`].
//!
//! A CPU's per-CPU area is at its kernel GS base; per-CPU symbols (`current_task`,
//! `pcpu_hot`, `this_cpu_off`) are offsets from it (x86-64 links the per-CPU section at 0, so
//! KASLR does not move them). `current_task` (or `pcpu_hot.current_task` on 6.2 and later) is
//! the running `task_struct`; its `group_leader` is the process (thread group) and its `mm`
//! the address space, whose `pgd` is a direct-map address of the page-table root.
//!
//! Checks on what is read: tasks and mms are canonical, 8-aligned kernel-half addresses; pid
//! and tgid are below 2^22 (PID_MAX_LIMIT); the task's tgid is its leader's pid and tgid.
//! `comm` is at most 15 bytes.

pub mod build_id;
pub mod maps;

use std::ops::ControlFlow;

use super::layout::LinuxLayout;
use super::list::{walk, ListEnd};
use super::read::{bytes_at, kernel_object, u32_at, u64_at, CR3_ADDR_MASK};
use super::text;
use super::{
    IdentifyError, Identity, ProcessFacts, ProcessKey, ProcessList, ThreadFacts, ThreadKey,
    MAX_PROCESSES,
};
use crate::mem::Memory;

/// `PF_KTHREAD`: the task is a kernel thread.
pub const PF_KTHREAD: u32 = 0x0020_0000;
/// Pids are below this (PID_MAX_LIMIT on 64-bit kernels).
pub const PID_LIMIT: u64 = 1 << 22;
/// `TASK_COMM_LEN`.
pub const COMM_LEN: usize = 16;

/// The per-CPU offset of the running task's pointer: `current_task`, else
/// `pcpu_hot + pcpu_hot.current_task`. None when the layout has neither.
pub fn current_task_offset(layout: &LinuxLayout) -> Option<u64> {
    if let Some(off) = layout.symbols.current_task {
        return Some(off);
    }
    let hot = layout.pcpu_hot.as_ref()?;
    Some(
        layout
            .symbols
            .pcpu_hot?
            .wrapping_add(u64::from(hot.current_task)),
    )
}

/// Checks that `base` is a CPU's per-CPU base: a kernel-half address whose `this_cpu_off` is
/// itself (only the first when the layout has no `this_cpu_off`).
pub fn check_per_cpu(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    base: u64,
) -> Result<(), IdentifyError> {
    kernel_object("per-CPU base", base).map_err(|_| IdentifyError::BadPerCpuBase(base))?;
    if let Some(off) = layout.symbols.this_cpu_off {
        let at = base.wrapping_add(off);
        let own = kmem
            .read_u64(at)
            .map_err(|_| IdentifyError::Unreadable(at))?;
        if own != base {
            return Err(IdentifyError::BadPerCpuBase(base));
        }
    }
    Ok(())
}

/// What a `task_struct` says of itself (7 reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFields {
    /// Its identity (`pid`, `start_time`).
    pub key: ThreadKey,
    /// `tgid`.
    pub tgid: u64,
    /// `flags`.
    pub flags: u32,
    /// `mm` (0 for a kernel thread).
    pub mm: u64,
    /// `group_leader`.
    pub leader: u64,
    /// `comm`.
    pub comm: [u8; COMM_LEN],
}

impl TaskFields {
    /// True for a kernel thread: `PF_KTHREAD`, or no address space of its own (`mm` NULL:
    /// the kernel's threads, and a task past `exit_mm`).
    pub fn kernel(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.mm == 0
    }
}

/// Reads the task at `task`.
pub fn task_fields(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    task: u64,
) -> Result<TaskFields, IdentifyError> {
    let t = &layout.task_struct;
    kernel_object("task_struct", task)?;
    let ids = [
        u64::from(u32_at(kmem, task, t.pid)?),
        u64::from(u32_at(kmem, task, t.tgid)?),
    ];
    for v in ids {
        if v >= PID_LIMIT {
            return Err(IdentifyError::Implausible {
                what: "pid",
                value: v,
            });
        }
    }
    let flags = u32_at(kmem, task, t.flags)?;
    let created = u64_at(kmem, task, t.start_time)?;
    let mm = u64_at(kmem, task, t.mm)?;
    if mm != 0 {
        kernel_object("mm", mm)?;
    }
    let leader = kernel_object("group_leader", u64_at(kmem, task, t.group_leader)?)?;
    let mut comm = [0u8; COMM_LEN];
    bytes_at(kmem, task, t.comm, &mut comm)?;
    comm[COMM_LEN - 1] = 0;
    Ok(TaskFields {
        key: ThreadKey {
            object: task,
            id: ids[0],
            created,
        },
        tgid: ids[1],
        flags,
        mm,
        leader,
        comm,
    })
}

/// The process of the task `t`: its group leader (read unless it is `t` itself), named by the
/// leader's comm (in brackets for a kernel thread, [`TaskFields::kernel`]: `[swapper/0]`,
/// `[kworker/0:1]`), its page-table root from `mm->pgd`
/// translated by `kmem`'s [`Memory::physical`], and its executable's path from
/// `mm->exe_file` where the layout has what that takes ([`maps::file_path`]).
pub fn process_of(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    t: &TaskFields,
) -> Result<ProcessFacts, IdentifyError> {
    let leader = if t.leader == t.key.object {
        *t
    } else {
        task_fields(kmem, layout, t.leader)?
    };
    if leader.key.id != t.tgid || leader.tgid != t.tgid {
        return Err(IdentifyError::Implausible {
            what: "thread group id",
            value: t.tgid,
        });
    }
    let kernel = t.kernel() || leader.flags & PF_KTHREAD != 0;
    let comm = text::fixed(&leader.comm);
    let name = if kernel { format!("[{comm}]") } else { comm };
    let mut cr3s = Vec::new();
    if !kernel && t.mm != 0 {
        let pgd = u64_at(kmem, t.mm, layout.mm_struct.pgd)?;
        if let Some(phys) = kernel_object("pgd", pgd)
            .ok()
            .and_then(|p| kmem.physical(p))
        {
            cr3s.push(phys & CR3_ADDR_MASK);
        }
    }
    // The executable's path, as /proc/PID/exe gives it: mm->exe_file's name and its parents'.
    let path = match (layout.vmas.as_ref(), layout.mm_struct.exe_file) {
        (Some(v), Some(off)) if !kernel && t.mm != 0 => u64_at(kmem, t.mm, off)
            .ok()
            .filter(|f| *f != 0)
            .and_then(|f| maps::file_path(kmem, v, f)),
        _ => None,
    };
    Ok(ProcessFacts {
        key: ProcessKey {
            object: t.leader,
            id: t.tgid,
            created: leader.key.created,
            space: if kernel { 0 } else { t.mm },
        },
        name,
        path,
        cr3s,
        kernel,
        peb: 0,
    })
}

/// The task at `task` and its process, read in full.
pub fn identify(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    task: u64,
) -> Result<Identity, IdentifyError> {
    let t = task_fields(kmem, layout, task)?;
    let process = process_of(kmem, layout, &t)?;
    Ok(Identity {
        process,
        thread: ThreadFacts {
            key: t.key,
            name: Some(text::fixed(&t.comm)),
        },
    })
}

/// Every process on `init_task.tasks` (the kernel's list of thread-group leaders, whose head
/// is the boot CPU's idle task, `swapper/0`, itself listed first), at most `limit` (never more
/// than [`MAX_PROCESSES`]). `slide` moves the vmlinux's `init_task` to where the guest's
/// kernel has it (KASLR; 0 without). None when the layout lacks `init_task` or
/// `task_struct.tasks`. A task whose fields fail their checks ends the walk.
pub fn processes(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    slide: u64,
    limit: usize,
) -> Option<ProcessList> {
    let init_task = layout.symbols.init_task?.wrapping_add(slide);
    let tasks = layout.task_struct.tasks?;
    let limit = limit.min(MAX_PROCESSES);
    let mut out = Vec::new();
    if limit == 0 {
        return Some(ProcessList {
            processes: out,
            end: ListEnd::Limit,
        });
    }
    match listed_process(kmem, layout, init_task) {
        Ok(p) => out.push(p),
        Err(end) => {
            return Some(ProcessList {
                processes: out,
                end,
            })
        }
    }
    let head = init_task.wrapping_add(u64::from(tasks));
    let end = walk(
        kmem,
        head,
        tasks,
        limit - 1,
        |mem, task| match listed_process(mem, layout, task) {
            Ok(p) => {
                out.push(p);
                ControlFlow::Continue(())
            }
            Err(end) => ControlFlow::Break(end),
        },
    );
    Some(ProcessList {
        processes: out,
        end,
    })
}

/// The process of the task at `task` on the list, or how its failure ends the walk.
fn listed_process(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    task: u64,
) -> Result<ProcessFacts, ListEnd> {
    task_fields(kmem, layout, task)
        .and_then(|t| process_of(kmem, layout, &t))
        .map_err(|e| match e {
            IdentifyError::Unreadable(a) => ListEnd::Unreadable(a),
            _ => ListEnd::BadLink(task),
        })
}

#[cfg(test)]
mod tests;
