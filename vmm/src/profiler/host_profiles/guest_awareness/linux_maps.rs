//! Linux processes' executable mappings of files, read once per process from its address
//! space's VMA tree ([`introspect::os::linux::maps`]) when a vCPU first switches to it, and
//! again on its next few switches while no executable file mapping has been found (a process
//! seen between its exec and the ELF loader's mappings). They go in its row of the process
//! table, for profile.json.

use introspect::os::linux::maps::mappings;
use introspect::os::{Identity, LinuxLayout};
use introspect::paging::Paging;
use report::hex::Hex;
use report::profile::MappingInfo;
use vm_memory::GuestMemoryMmap;

use super::process_table::Found;
use super::{GuestAwareness, LDR_TRIES};
use crate::profiler::host_profiles::stacks::GuestVirt;

/// Executable file mappings kept per process.
pub const MAX_PROCESS_MAPPINGS: usize = 1024;

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
        let mut user = self.user_modules.lock().unwrap_or_else(|e| e.into_inner());
        let tries = match user.retry.get(&row) {
            Some(0) => return,
            Some(&n) => n,
            None if found.new_process => LDR_TRIES,
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
            user.retry.insert(row, tries - 1);
            return;
        }
        user.retry.insert(row, 0);
        self.table.set_mappings(row, list);
    }
}
