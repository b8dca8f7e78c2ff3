//! The ELF files a Linux process maps, for the call-frame information its user-mode stacks
//! are unwound with at sample time ([`introspect::cfi`]): once a process's executable file
//! mappings are read ([`super::linux_maps`]), each file is looked up by its path in the
//! archives the run was given (the initramfs it booted, `--initramfs`), its unwind sections
//! read once for every process that maps it, and the process's [`SpaceUnwinder`] built with
//! each file at its load bias.
//!
//! Only archives are read here: they are in memory, and the vCPU thread that builds an
//! unwinder opens no file (its seccomp filter refuses). `--sysroot` trees name functions in
//! the report, after the run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use introspect::cfi::{ElfUnwindInfo, SpaceUnwinder};
use report::profile::MappingInfo;
use report::symbols::elf::{build_id, unwind_info, Segments};
use report::symbols::guest_files::GuestFiles;

/// Files whose unwind sections (or their absence) are kept; past it, a new path is read for
/// each process that maps it.
pub const MAX_FILES: usize = 4096;
/// Processes whose unwinders are kept; past it, a new process's user stacks are unwound by
/// frame pointers.
pub const MAX_PROCESSES: usize = 65_536;

/// A guest file: its path and, where the guest's copy had one, its build id.
type FileKey = (String, Option<String>);

/// One file's unwind sections and where its bytes are linked.
struct UnwindFile {
    info: ElfUnwindInfo,
    segments: Segments,
}

/// The run's archives, the files read from them, and each process's unwinder.
#[derive(Default)]
pub struct UnwindFiles {
    files: GuestFiles,
    /// By the guest's path and build id: None for a file not found (as that build), not ELF,
    /// or without CFI.
    by_path: Mutex<HashMap<FileKey, Option<Arc<UnwindFile>>>>,
    /// By process row.
    by_process: RwLock<HashMap<u32, Arc<SpaceUnwinder>>>,
}

impl UnwindFiles {
    /// Looks files up in the archives of `files` (its sysroots are left out).
    pub fn new(files: &GuestFiles) -> Self {
        UnwindFiles {
            files: files.archives(),
            ..Default::default()
        }
    }

    /// True when there is nowhere to look.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The file the guest calls `path`, as the build `id` when the guest said which (another
    /// build's rules would unwind the wrong code: the next place is looked in), read once.
    fn file(&self, path: &str, id: Option<&str>) -> Option<Arc<UnwindFile>> {
        let key = (path.to_string(), id.map(str::to_string));
        let mut by_path = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = by_path.get(&key) {
            return known.clone();
        }
        let same_build = |bytes: &[u8], _: &_| match (id, build_id(bytes)) {
            (Some(guest), Some(found)) => guest == found,
            _ => true,
        };
        let read = self
            .files
            .read_accepted(path, files::bounded::SYMBOLS, same_build)
            .and_then(|(bytes, _)| {
                Some(Arc::new(UnwindFile {
                    info: unwind_info(&bytes)?,
                    segments: Segments::of(&bytes)?,
                }))
            });
        if by_path.len() < MAX_FILES {
            by_path.insert(key, read.clone());
        }
        read
    }

    /// Builds process row `row`'s unwinder from its executable file `mappings` (once per row).
    pub fn add_process(&self, row: u32, mappings: &[MappingInfo]) {
        if self.is_empty() {
            return;
        }
        let mut space = SpaceUnwinder::new();
        for m in mappings {
            let Some(file) = self.file(&m.path, m.build_id.as_deref()) else {
                continue;
            };
            // The mapping's first byte was linked at `linked`: the file's addresses are moved by
            // start - linked in this address space.
            let Some(bias) = file
                .segments
                .linked_address(m.offset.0)
                .and_then(|linked| m.start.0.checked_sub(linked))
            else {
                continue;
            };
            space.add(&m.path, m.start.0..m.end.0, bias, &file.info);
        }
        if space.ranges().is_empty() {
            return;
        }
        let mut by_process = self.by_process.write().unwrap_or_else(|e| e.into_inner());
        if by_process.len() < MAX_PROCESSES || by_process.contains_key(&row) {
            by_process.insert(row, Arc::new(space));
        }
    }

    /// Process row `row`'s unwinder, if its files were found.
    pub fn of_process(&self, row: u32) -> Option<Arc<SpaceUnwinder>> {
        if self.is_empty() {
            return None;
        }
        let by_process = self.by_process.read().unwrap_or_else(|e| e.into_inner());
        by_process.get(&row).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use report::hex::Hex;
    use report::symbols::guest_files::initrd::{push_entry, Initrd};

    /// An archive holding the test binary (an ELF with `.eh_frame`) as /bin/prog, and a text
    /// file as /etc/motd.
    fn archive() -> GuestFiles {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let mut cpio = Vec::new();
        push_entry(&mut cpio, "bin/prog", 0o100_755, &exe, 1, 1);
        push_entry(&mut cpio, "etc/motd", 0o100_644, b"hello", 2, 1);
        push_entry(&mut cpio, "TRAILER!!!", 0, b"", 0, 1);
        let initrd = Initrd::parse(&cpio).unwrap();
        GuestFiles::new().with_initrd("initrd.cpio".into(), initrd)
    }

    fn mapping(path: &str, start: u64, offset: u64) -> MappingInfo {
        MappingInfo {
            start: Hex(start),
            end: Hex(start + 0x1000),
            offset: Hex(offset),
            path: path.to_string(),
            build_id: None,
        }
    }

    #[test]
    fn a_process_mapping_a_file_of_the_archive_gets_its_unwinder() {
        let files = UnwindFiles::new(&archive());
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let segments = Segments::of(&exe).unwrap();
        // The test binary's executable segment as the loader maps it (from the page holding
        // its first byte), 1 GiB above where it was linked.
        let text = unwind_info(&exe).unwrap().text.unwrap().addresses.start;
        let offset = (0..exe.len() as u64)
            .step_by(0x1000)
            .take_while(|&o| segments.linked_address(o).is_some_and(|a| a <= text))
            .last()
            .unwrap();
        let start = segments.linked_address(offset).unwrap() + (1 << 30);
        files.add_process(
            7,
            &[
                mapping("/bin/prog", start, offset),
                mapping("/etc/motd", 0x10_0000, 0),
                mapping("/bin/missing", 0x20_0000, 0),
            ],
        );
        let space = files.of_process(7).unwrap();
        assert_eq!(space.ranges().to_vec(), vec![start..start + 0x1000]);
        assert!(files.of_process(8).is_none());
        let by_path = files.by_path.lock().unwrap();
        assert_eq!(by_path.len(), 3);
        let known = |path: &str| by_path[&(path.to_string(), None)].is_none();
        assert!(known("/etc/motd") && known("/bin/missing"));
        drop(by_path);

        // The guest's build id of the file: the archive's copy is used when it has the same,
        // never when it has another (another build's rules would unwind the wrong code).
        let own = build_id(&exe).expect("the test binary has a build id (Debian's gcc links one)");
        for (row, id, used) in [(9, own.clone(), true), (10, "00".repeat(20), false)] {
            let mut m = mapping("/bin/prog", start, offset);
            m.build_id = Some(id);
            files.add_process(row, &[m]);
            assert_eq!(
                files.of_process(row).is_some(),
                used,
                "build id {own} in the archive"
            );
        }
    }

    #[test]
    fn without_archives_nothing_is_built() {
        let files = UnwindFiles::new(&GuestFiles::new().with_sysroot("/".into()));
        assert!(files.is_empty());
        files.add_process(1, &[mapping("/bin/sh", 0x40_0000, 0)]);
        assert!(files.of_process(1).is_none());
    }
}
