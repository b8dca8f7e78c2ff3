//! Linux processes' executable mappings of files, read from a process's address space's VMA
//! tree ([`introspect::os::linux::maps`]).
//!
//! - **First read.** When a vCPU first switches to a process, and again on later switches while
//!   no executable file mapping has been found: a process is often first seen inside its exec,
//!   before the ELF loader has mapped anything, and where the host emulates guest-kernel code
//!   an exec takes long enough for many switches. These reads back off (10 ms after the first,
//!   doubling, at most [`READS`] reads, about ten minutes in all).
//! - **Rereads.** Once some were found, a user-mode sample whose PC lies in none of the
//!   process's executable mappings (a library mapped since: libc, which ld.so maps after the
//!   first read found the program and ld.so; a `dlopen`) reads them again, with the same
//!   back-off, at most [`REREADS`] times. Each vCPU checks its samples against a copy of its
//!   current process's ranges, refreshed when any process's change.
//!
//! The mappings go in the process's row of the process table, for profile.json, and to
//! [`super::unwind_files`] for the process's user-mode stacks.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use introspect::os::linux::maps::mappings;
use introspect::os::{Identity, LinuxLayout};
use introspect::paging::Paging;
use report::hex::Hex;
use report::profile::MappingInfo;
use vm_memory::GuestMemoryMmap;

use super::GuestAwareness;
use crate::profiler::host_profiles::stacks::GuestVirt;

/// Executable file mappings kept per process.
pub const MAX_PROCESS_MAPPINGS: usize = 1024;
/// Reads of a process's mappings while none is found.
pub const READS: u8 = 16;
/// Reads of a process's mappings after some were found, for PCs outside them.
pub const REREADS: u8 = 16;
/// Seconds from a read to the next one allowed.
const FIRST_WAIT_S: f64 = 0.01;

/// Where a process's reads stand.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reads {
    /// Reads left.
    left: u8,
    /// The run's second from which the next may be made.
    at: f64,
    /// Some executable file mapping was found: the reads left are rereads.
    found: bool,
}

/// Why a read is asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// A vCPU switched to the process (`new`: its row was just made).
    Switch { new: bool },
    /// A user-mode sample's PC lay outside its executable mappings.
    Outside,
}

/// A vCPU's copy of its current process's executable ranges.
#[derive(Default)]
pub struct VcpuMapped {
    row: u32,
    generation: u32,
    ranges: Option<Arc<[Range<u64>]>>,
}

impl GuestAwareness {
    /// Reads the executable file mappings of the Linux process `id` names (its row: `row`) if
    /// `why` and its reads so far allow, through the kernel's paging `kernel`.
    pub(super) fn read_linux_mappings(
        &self,
        mem: &GuestMemoryMmap,
        kernel: Paging,
        layout: &LinuxLayout,
        id: &Identity,
        row: u32,
        why: Why,
    ) {
        let p = &id.process;
        if p.kernel || p.key.space == 0 || layout.vmas.is_none() {
            return;
        }
        let now = self.table.now_s();
        let mut user = self.user_modules.lock().unwrap_or_else(|e| e.into_inner());
        let reads = match (user.linux_reads.get(&row), why) {
            (None, Why::Switch { new: true }) => Reads {
                left: READS,
                at: 0.0,
                found: false,
            },
            (Some(r), Why::Switch { .. }) if !r.found => *r,
            (Some(r), Why::Outside) if r.found => *r,
            _ => return,
        };
        if reads.left == 0 || now < reads.at {
            return;
        }
        let limit = if reads.found { REREADS } else { READS };
        let wait = FIRST_WAIT_S * f64::from(1u32 << (limit - reads.left).min(20));
        let mut next = Reads {
            left: reads.left - 1,
            at: now + wait,
            found: reads.found,
        };
        let exec: Vec<_> = match mappings(&mut GuestVirt::new(mem, kernel), layout, p.key.space) {
            Ok(m) => m.mappings.into_iter().filter(|m| m.exec()).collect(),
            Err(e) => {
                log::debug!("{} (pid {}): mappings not read: {e}", p.name, p.key.id);
                Vec::new()
            }
        };
        let ranges: Arc<[Range<u64>]> = exec.iter().map(|m| m.start..m.end).collect();
        let list: Vec<MappingInfo> = exec
            .into_iter()
            .filter_map(|m| {
                Some(MappingInfo {
                    start: Hex(m.start),
                    end: Hex(m.end),
                    offset: Hex(m.offset),
                    path: m.path?,
                })
            })
            .take(MAX_PROCESS_MAPPINGS)
            .collect();
        if list.is_empty() {
            user.linux_reads.insert(row, next);
            return;
        }
        if !next.found {
            next = Reads {
                left: REREADS,
                at: now + FIRST_WAIT_S,
                found: true,
            };
        }
        user.linux_reads.insert(row, next);
        drop(user);
        self.linux_mapped
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(row, ranges);
        self.mapped_generation.fetch_add(1, Ordering::Release);
        if let Some(files) = self.unwind_files.get() {
            files.add_process(row, &list);
        }
        self.table.set_mappings(row, list);
    }

    /// True unless `pc`, a user-mode address of process row `row`, lies outside every
    /// executable mapping read of it (`m`: the vCPU's copy). A process with none read yet is
    /// left to the reads on switches.
    pub(super) fn pc_mapped(&self, m: &mut VcpuMapped, row: u32, pc: u64) -> bool {
        let generation = self.mapped_generation.load(Ordering::Acquire);
        if m.row != row || m.generation != generation || m.ranges.is_none() {
            let all = self.linux_mapped.read().unwrap_or_else(|e| e.into_inner());
            *m = VcpuMapped {
                row,
                generation,
                ranges: all.get(&row).cloned(),
            };
        }
        let Some(ranges) = &m.ranges else {
            return true;
        };
        // In address order, none overlapping (the VMA tree's order).
        let i = ranges.partition_point(|r| r.end <= pc);
        ranges.get(i).is_some_and(|r| r.start <= pc)
    }
}
