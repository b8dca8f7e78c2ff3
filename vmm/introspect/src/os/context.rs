//! Naming the thread a sample ran in, once per thread change.
//!
//! Per sample: the per-CPU base (cached per vCPU, checked when first seen and every
//! [`BASE_CHECK_EVERY`] samples), one 8-byte read of the running thread's pointer in it, and,
//! when the pointer is the one of this vCPU's last sample, one more 8-byte read of that thread's
//! creation time (a thread object freed and reused for a new thread between two samples has a
//! new one) and, for a Linux user task, one of its mm (an exec replaces it: the new program's
//! samples are its own from the first). Every [`RECHECK_EVERY`] samples of the same pointer
//! its identity fields are read again (catching a rename). Only a different pointer costs more: a cached thread
//! is re-checked by its identity fields (4 to 7 reads), a new one read in full with its process
//! (about 12 to 15 reads; on Linux, the executable's path adds three or four a directory level
//! of it: `mm->exe_file` is read again for each new thread of a process). Nothing is allocated unless a thread is read in full or renamed
//! (or its name is not valid UTF-8).

use std::collections::HashMap;

use super::layout::{LinuxLayout, WindowsLayout};
use super::{linux, text, windows};
use super::{GuestOs, IdentifyError, Identity, OsLayout, SampleRegs};
use crate::mem::{canonical, Memory};

/// Samples between two checks of a cached per-CPU base.
pub const BASE_CHECK_EVERY: u32 = 65_536;
/// Samples of the same thread pointer between two re-reads of its identity fields.
pub const RECHECK_EVERY: u32 = 64;
/// Threads remembered per vCPU; the cache is emptied when full.
pub const MAX_CACHED_THREADS: usize = 4096;

/// Counters of one vCPU's identification work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContextStats {
    /// Samples identified from the cache (same thread pointer, or a cached one re-checked).
    pub hits: u64,
    /// Samples whose thread had to be read.
    pub reads: u64,
    /// Samples that could not be identified.
    pub failures: u64,
}

/// One vCPU's view of the guest kernel: its per-CPU base and the threads it has seen.
#[derive(Debug)]
pub struct GuestContext {
    os: GuestOs,
    /// The per-CPU offset of the running thread's pointer (None: the layout cannot say).
    thread_slot: Option<u64>,
    /// The per-CPU base last validated, and the samples since.
    base: Option<u64>,
    since_check: u32,
    want_kgs: bool,
    /// The thread pointer of the last identified sample, and the samples since its fields
    /// were last read.
    last: Option<u64>,
    since_recheck: u32,
    threads: HashMap<u64, Identity>,
    stats: ContextStats,
}

/// True for a canonical kernel-half address.
fn kernel_half(a: u64) -> bool {
    a >> 63 == 1 && canonical(a)
}

impl GuestContext {
    /// Nothing known yet about the vCPU, in the kernel `os`.
    pub fn new(os: GuestOs) -> Self {
        let thread_slot = match &os.layout {
            OsLayout::Windows(l) => Some(windows::current_thread_slot(l, 0)),
            OsLayout::Linux(l) => linux::current_task_offset(l),
        };
        GuestContext {
            os,
            thread_slot,
            base: None,
            since_check: 0,
            want_kgs: false,
            last: None,
            since_recheck: 0,
            threads: HashMap::new(),
            stats: ContextStats::default(),
        }
    }

    /// The kernel this context reads.
    pub fn os(&self) -> &GuestOs {
        &self.os
    }

    /// The thread (and its process) the vCPU ran when sampled with `regs`. `kmem` reads
    /// kernel-virtual memory through the kernel's page tables.
    pub fn identify(
        &mut self,
        kmem: &mut dyn Memory,
        regs: &SampleRegs,
    ) -> Result<&Identity, IdentifyError> {
        match self.find(kmem, regs) {
            Ok(ptr) => {
                self.last = Some(ptr);
                self.threads.get(&ptr).ok_or(IdentifyError::Unreadable(ptr))
            }
            Err(e) => {
                self.stats.failures += 1;
                self.last = None;
                Err(e)
            }
        }
    }

    /// True when the caller should read IA32_KERNEL_GS_BASE at this vCPU's next sample.
    pub fn wants_kernel_gs_base(&self) -> bool {
        self.want_kgs
    }

    /// What identification has cost so far.
    pub fn stats(&self) -> ContextStats {
        self.stats
    }

    /// The per-CPU base for this sample, checked.
    fn per_cpu_base(
        &mut self,
        kmem: &mut dyn Memory,
        regs: &SampleRegs,
    ) -> Result<u64, IdentifyError> {
        let given = regs.kernel_gs_base.filter(|&k| kernel_half(k));
        let candidate = if regs.cpl == 0 && kernel_half(regs.gs_base) {
            regs.gs_base
        } else if let Some(k) = given {
            k
        } else if let Some(b) = self.base {
            b
        } else {
            self.want_kgs = true;
            return Err(IdentifyError::NoPerCpuBase);
        };
        if self.base == Some(candidate) && self.since_check < BASE_CHECK_EVERY {
            self.since_check += 1;
            return Ok(candidate);
        }
        let checked = match &self.os.layout {
            OsLayout::Windows(l) => windows::check_kpcr(kmem, l, candidate),
            OsLayout::Linux(l) => linux::check_per_cpu(kmem, l, candidate),
        };
        match checked {
            Ok(()) => {
                self.base = Some(candidate);
                self.since_check = 0;
                self.want_kgs = false;
                Ok(candidate)
            }
            Err(e) => {
                if self.base == Some(candidate) {
                    self.base = None;
                }
                self.want_kgs = self.base.is_none();
                Err(e)
            }
        }
    }

    /// Finds the running thread's pointer and makes sure `threads` holds its identity.
    fn find(&mut self, kmem: &mut dyn Memory, regs: &SampleRegs) -> Result<u64, IdentifyError> {
        let slot = self.thread_slot.ok_or(IdentifyError::Implausible {
            what: "layout without a current-thread symbol",
            value: 0,
        })?;
        let base = self.per_cpu_base(kmem, regs)?;
        let at = base.wrapping_add(slot);
        let ptr = kmem
            .read_u64(at)
            .map_err(|_| IdentifyError::Unreadable(at))?;
        if self.last == Some(ptr) && self.since_recheck < RECHECK_EVERY {
            if let Some(id) = self.threads.get(&ptr) {
                let created_off = match &self.os.layout {
                    OsLayout::Windows(l) => l.ethread.create_time,
                    OsLayout::Linux(l) => l.task_struct.start_time,
                };
                let at = ptr.wrapping_add(u64::from(created_off));
                let created = kmem
                    .read_u64(at)
                    .map_err(|_| IdentifyError::Unreadable(at))?;
                // A Linux exec keeps the task and replaces its mm: a new process from the
                // sample after it.
                let space = match &self.os.layout {
                    OsLayout::Linux(l) if !id.process.kernel => {
                        let at = ptr.wrapping_add(u64::from(l.task_struct.mm));
                        kmem.read_u64(at)
                            .map_err(|_| IdentifyError::Unreadable(at))?
                    }
                    _ => id.process.key.space,
                };
                if created == id.thread.key.created && space == id.process.key.space {
                    self.since_recheck += 1;
                    self.stats.hits += 1;
                    return Ok(ptr);
                }
            }
        }
        self.since_recheck = 0;
        let layout = self.os.layout;
        let rechecked = match self.threads.get_mut(&ptr) {
            Some(cached) => match &layout {
                OsLayout::Windows(l) => recheck_windows(kmem, l, ptr, cached)?,
                OsLayout::Linux(l) => recheck_linux(kmem, l, ptr, cached)?,
            },
            None => false,
        };
        if rechecked {
            self.stats.hits += 1;
            return Ok(ptr);
        }
        let identity = match &layout {
            OsLayout::Windows(l) => windows::identify(kmem, l, ptr)?,
            OsLayout::Linux(l) => linux::identify(kmem, l, ptr)?,
        };
        self.stats.reads += 1;
        if self.threads.len() >= MAX_CACHED_THREADS && !self.threads.contains_key(&ptr) {
            self.threads.clear();
        }
        self.threads.insert(ptr, identity);
        Ok(ptr)
    }
}

/// Re-reads a cached Windows thread's identity fields: true (the name refreshed) when they
/// still name `cached`, false when the object is now another thread or process.
fn recheck_windows(
    kmem: &mut dyn Memory,
    layout: &WindowsLayout,
    ptr: u64,
    cached: &mut Identity,
) -> Result<bool, IdentifyError> {
    let t = windows::thread_fields(kmem, layout, ptr)?;
    if t.key != cached.thread.key
        || t.process != cached.process.key.object
        || t.process_id != cached.process.key.id
    {
        return Ok(false);
    }
    if !windows::thread_name_is(kmem, layout, t.name_ptr, cached.thread.name.as_deref()) {
        cached.thread.name = windows::thread_name(kmem, layout, t.name_ptr);
    }
    Ok(true)
}

/// Re-reads a cached Linux task's identity fields: true (comm refreshed) when they still name
/// `cached`, false when the task is now another thread, or its process another program.
fn recheck_linux(
    kmem: &mut dyn Memory,
    layout: &LinuxLayout,
    ptr: u64,
    cached: &mut Identity,
) -> Result<bool, IdentifyError> {
    let t = linux::task_fields(kmem, layout, ptr)?;
    let kernel = t.kernel();
    let space = if kernel { 0 } else { t.mm };
    if t.key != cached.thread.key
        || t.leader != cached.process.key.object
        || t.tgid != cached.process.key.id
        || space != cached.process.key.space
        || kernel != cached.process.kernel
    {
        return Ok(false);
    }
    let same = cached
        .thread
        .name
        .as_deref()
        .is_some_and(|n| text::fixed_is(&t.comm, n));
    if !same {
        let comm = text::fixed(&t.comm);
        if t.leader == ptr {
            cached.process.name = if kernel {
                format!("[{comm}]")
            } else {
                comm.clone()
            };
        }
        cached.thread.name = Some(comm);
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
