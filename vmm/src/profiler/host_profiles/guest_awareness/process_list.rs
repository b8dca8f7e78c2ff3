//! The guest kernel's own list of its processes, walked once a layout is known and again at
//! the run's end, so that every process that existed is listed (with 0 samples where none
//! landed) and the `[cr3 ..]` rows of samples taken before the layout arrived are folded into
//! the process that owned their address space ([`ProcessTable::listed`]).
//!
//! Windows: `PsActiveProcessHead` (its RVA from the kernel's PDB: the kernel does not export
//! it) through each `_EPROCESS`'s `ActiveProcessLinks`, by `introspect::os::windows::processes`.
//! Linux: `init_task` and the thread-group leaders on its `tasks` list, by
//! `introspect::os::linux::processes` (a layout without `init_task` or `task_struct.tasks`,
//! such as a bare BTF blob's, is not walked). Both are bounded (16,384 entries), every link
//! checked, an unreadable or implausible entry ending the walk with what was read.
//!
//! [`ProcessTable::listed`]: super::process_table::ProcessTable::listed

use std::sync::atomic::Ordering;

use introspect::os::list::ListEnd;
use introspect::os::{linux, windows, OsLayout, MAX_PROCESSES};
use introspect::paging::Paging;
use vm_memory::GuestMemoryMmap;

use super::process_table::Listed;
use super::GuestAwareness;
use crate::profiler::host_profiles::stacks::GuestVirt;

impl GuestAwareness {
    /// Walks the process list of the kernel in use, reading kernel memory through `kernel`
    /// (the page tables of a kernel-mode sample), and takes what it finds into the run's rows.
    /// None when no layout is known, or it cannot find the list (a Linux layout without
    /// `init_task`).
    pub fn walk_process_list(&self, mem: &GuestMemoryMmap, kernel: Paging) -> Option<Listed> {
        let os = self.os()?;
        let mut kmem = GuestVirt::new(mem, kernel);
        let list = match os.layout {
            OsLayout::Windows(layout) => {
                windows::processes(&mut kmem, &layout, os.load_bias, MAX_PROCESSES)
            }
            OsLayout::Linux(layout) => {
                linux::processes(&mut kmem, &layout, os.load_bias, MAX_PROCESSES)?
            }
        };
        if list.end != ListEnd::Complete {
            log::info!(
                "the guest kernel's process list was read in part ({} processes): {:?}",
                list.processes.len(),
                list.end
            );
        }
        Some(self.table.listed(&list.processes, self.table.now_s()))
    }

    /// Walks the list once per layout: the first sample to see layout `generation` with a
    /// kernel-mode sample's page tables (`kernel`) does.
    pub(super) fn walk_once(&self, generation: u32, mem: &GuestMemoryMmap, kernel: Paging) {
        if self.walked.load(Ordering::Relaxed) != generation
            && self.walked.swap(generation, Ordering::AcqRel) != generation
        {
            *self.walk_paging.lock().unwrap_or_else(|e| e.into_inner()) = Some(kernel);
            self.walk_process_list(mem, kernel);
        }
    }

    /// Walks the list again as the run ends (every vCPU has stopped), through the page tables
    /// of a vCPU's last kernel-mode sample (else the first walk's): processes that started
    /// since the first walk, and never ran in a sample, are listed too.
    pub fn walk_at_end(&self, mem: &GuestMemoryMmap) -> Option<Listed> {
        let kernel = (0..self.vcpus.len())
            .find_map(|v| self.vcpu(v)?.kernel_paging)
            .or(*self.walk_paging.lock().unwrap_or_else(|e| e.into_inner()))?;
        self.walk_process_list(mem, kernel)
    }
}
