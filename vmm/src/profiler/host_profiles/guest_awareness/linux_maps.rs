//! Linux processes' executable mappings of files, read once per process from its address
//! space's VMA tree ([`introspect::os::linux::maps`]) when a vCPU first switches to it, and
//! again on later switches while no executable file mapping has been found: a process is
//! often first seen inside its exec, before the ELF loader has mapped anything, and where the
//! host emulates guest-kernel code an exec takes long enough for many switches. The reads
//! back off (10 ms after the first, doubling, at most [`READS`] reads, about ten minutes in
//! all). The mappings go in the process's row of the process table, for profile.json.

use introspect::os::linux::maps::mappings;
use introspect::os::{Identity, LinuxLayout};
use introspect::paging::Paging;
use report::hex::Hex;
use report::profile::MappingInfo;
use vm_memory::GuestMemoryMmap;

use super::process_table::Found;
use super::GuestAwareness;
use crate::profiler::host_profiles::stacks::GuestVirt;

/// Executable file mappings kept per process.
pub const MAX_PROCESS_MAPPINGS: usize = 1024;
/// Reads of a process's mappings while none is found.
pub const READS: u8 = 16;
/// Seconds from a read that found none to the next.
const FIRST_WAIT_S: f64 = 0.01;

impl GuestAwareness {
    /// Reads the executable file mappings of the Linux process `id` names (its row: `found`)
    /// when it is new or its earlier reads found none, through the kernel's paging `kernel`.
    pub(super) fn read_linux_mappings(
        &self,
        mem: &GuestMemoryMmap,
        kernel: Paging,
        layout: &LinuxLayout,
        id: &Identity,
        found: Found,
    ) {
        let p = &id.process;
        if p.kernel || p.key.space == 0 || layout.vmas.is_none() {
            return;
        }
        let row = found.at.process;
        let now = self.table.now_s();
        let mut user = self.user_modules.lock().unwrap_or_else(|e| e.into_inner());
        let left = match user.linux_retry.get(&row) {
            Some(&(0, _)) => return,
            Some(&(_, at)) if now < at => return,
            Some(&(n, _)) => n,
            None if found.new_process => READS,
            None => return,
        };
        let list: Vec<MappingInfo> =
            match mappings(&mut GuestVirt::new(mem, kernel), layout, p.key.space) {
                Ok(m) => m
                    .mappings
                    .into_iter()
                    .filter(|m| m.exec())
                    .filter_map(|m| {
                        Some(MappingInfo {
                            start: Hex(m.start),
                            end: Hex(m.end),
                            offset: Hex(m.offset),
                            path: m.path?,
                        })
                    })
                    .take(MAX_PROCESS_MAPPINGS)
                    .collect(),
                Err(e) => {
                    log::debug!("{} (pid {}): mappings not read: {e}", p.name, p.key.id);
                    Vec::new()
                }
            };
        if list.is_empty() {
            let wait = FIRST_WAIT_S * f64::from(1u32 << (READS - left).min(20));
            user.linux_retry.insert(row, (left - 1, now + wait));
            return;
        }
        user.linux_retry.insert(row, (0, 0.0));
        self.table.set_mappings(row, list);
    }
}
