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
//! - **Build ids.** Each mapped file's GNU build id is read from the first page the process
//!   maps of it ([`introspect::os::linux::build_id`], through the process's page tables), so
//!   that a file found on the host as another build is never used. A page not in memory yet
//!   (a process read inside its exec) makes its user-mode samples ask for a reread, within
//!   the same [`REREADS`].
//!
//! The mappings go in the process's row of the process table, for profile.json, and to
//! [`super::unwind_files`] for the process's user-mode stacks.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use introspect::mem::Memory;
use introspect::os::linux::build_id::{build_id, hex};
use introspect::os::linux::maps::{mappings, Mapping};
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
/// The bytes of a file's first page read for its build id.
const PAGE: u64 = 4096;
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

/// A process's executable mappings as last read, for the checks at each user-mode sample.
#[derive(Debug, Default)]
pub struct Mapped {
    /// Their ranges, in address order, none overlapping (the VMA tree's order).
    pub ranges: Box<[Range<u64>]>,
    /// The first page of a file they map was not in memory at the read: its build id is
    /// still to be read.
    pub ids_pending: bool,
}

/// A vCPU's copy of its current process's executable ranges.
#[derive(Default)]
pub struct VcpuMapped {
    row: u32,
    generation: u32,
    mapped: Option<Arc<Mapped>>,
    /// A user-mode frame of process `row`'s last stack lay outside its executable mappings
    /// (a return address into a library mapped since, such as libc's under `main`): its
    /// mappings are read again at the next sample in it.
    frame_outside: bool,
}

/// A file's build id as a read found it.
enum FileId {
    /// Read: the id, or None for a file without one (or not ELF).
    Read(Option<String>),
    /// Its first page is not mapped, or not in memory.
    Unreadable,
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
        let all = match mappings(&mut GuestVirt::new(mem, kernel), layout, p.key.space) {
            Ok(m) => m.mappings,
            Err(e) => {
                log::debug!("{} (pid {}): mappings not read: {e}", p.name, p.key.id);
                Vec::new()
            }
        };
        let exec: Vec<&Mapping> = all.iter().filter(|m| m.exec()).collect();
        // The process's own page tables, for the first page of each file it maps.
        let own = p.cr3s.first().map(|&cr3| Paging { cr3, ..kernel });
        let mut ids: HashMap<&str, FileId> = HashMap::new();
        let list: Vec<MappingInfo> = exec
            .iter()
            .filter_map(|m| {
                let path = m.path.as_deref()?;
                let id = ids.entry(path).or_insert_with(|| match own {
                    Some(own) => file_build_id(mem, own, &all, path),
                    None => FileId::Unreadable,
                });
                Some(MappingInfo {
                    start: Hex(m.start),
                    end: Hex(m.end),
                    offset: Hex(m.offset),
                    path: path.to_string(),
                    build_id: match id {
                        FileId::Read(id) => id.clone(),
                        FileId::Unreadable => None,
                    },
                })
            })
            .take(MAX_PROCESS_MAPPINGS)
            .collect();
        let unread = ids.values().any(|id| matches!(id, FileId::Unreadable));
        let ranges: Box<[Range<u64>]> = exec.iter().map(|m| m.start..m.end).collect();
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
        // Build ids still to read while rereads are left.
        let mapped = Arc::new(Mapped {
            ranges,
            ids_pending: unread && next.left > 0,
        });
        self.linux_mapped
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(row, mapped);
        self.mapped_generation.fetch_add(1, Ordering::Release);
        if let Some(files) = self.unwind_files.get() {
            files.add_process(row, &list);
        }
        self.table.set_mappings(row, list);
    }

    /// True unless the mappings read of process row `row` (`m`: the vCPU's copy) leave
    /// `pc`, one of its user-mode addresses, unaccounted for: outside every executable
    /// mapping, or with a build id still to read (a file's first page was not in memory at
    /// the read). A process with none read yet is left to the reads on switches.
    /// A frame of the process's last stack noted outside them ([`Self::note_user_frames`])
    /// counts as `pc` would. (Only user-mode samples are checked: a kernel-mode one may be the
    /// process's exit, its mappings half torn down.)
    pub(super) fn pc_mapped(&self, m: &mut VcpuMapped, row: u32, pc: u64) -> bool {
        self.refresh(m, row);
        let Some(mapped) = &m.mapped else {
            return true;
        };
        let outside = std::mem::take(&mut m.frame_outside);
        !outside && !mapped.ids_pending && mapped.covers(pc)
    }

    /// Notes the user-mode frames `pcs` of a stack walked in process row `row` (`m`: the
    /// vCPU's copy, as [`Self::pc_mapped`] left it): one outside every executable mapping
    /// read has the next sample in the process read its mappings again.
    pub(super) fn note_user_frames(&self, m: &mut VcpuMapped, row: u32, pcs: &[u64]) {
        self.refresh(m, row);
        if let Some(mapped) = &m.mapped {
            // The lower half of the address space, at every paging depth.
            let mut user = pcs.iter().filter(|&&pc| pc != 0 && pc >> 63 == 0);
            m.frame_outside |= user.any(|&pc| !mapped.covers(pc));
        }
    }

    /// `m`, the vCPU's copy, made process row `row`'s mappings as last read (its flag kept
    /// while the row is the same).
    fn refresh(&self, m: &mut VcpuMapped, row: u32) {
        let generation = self.mapped_generation.load(Ordering::Acquire);
        if m.row != row || m.generation != generation || m.mapped.is_none() {
            let all = self.linux_mapped.read().unwrap_or_else(|e| e.into_inner());
            *m = VcpuMapped {
                row,
                generation,
                mapped: all.get(&row).cloned(),
                frame_outside: m.row == row && m.frame_outside,
            };
        }
    }
}

impl Mapped {
    /// True when `pc` lies in one of the executable ranges.
    fn covers(&self, pc: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= pc);
        self.ranges.get(i).is_some_and(|r| r.start <= pc)
    }
}

/// The build id of the file at `path`, from the first page of its mapping at file offset 0
/// among `all` (the process's mappings), read through the process's page tables `user`.
fn file_build_id(mem: &GuestMemoryMmap, user: Paging, all: &[Mapping], path: &str) -> FileId {
    let Some(head) = all
        .iter()
        .find(|m| m.offset == 0 && m.path.as_deref() == Some(path))
    else {
        return FileId::Unreadable;
    };
    let mut page = vec![0u8; (head.end - head.start).min(PAGE) as usize];
    match GuestVirt::new(mem, user).read(head.start, &mut page) {
        Ok(()) => FileId::Read(build_id(&page).map(|id| hex(&id))),
        Err(_) => FileId::Unreadable,
    }
}
