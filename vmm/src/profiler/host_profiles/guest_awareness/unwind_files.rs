//! The ELF files a Linux process maps, for the call-frame information its user-mode stacks
//! are unwound with at sample time ([`introspect::cfi`]): once a process's executable file
//! mappings are read ([`super::linux_maps`]), each file is looked up by its path in the places
//! the run was given, in the report's order (`--sysroot` trees, the initramfs it booted and
//! `--initramfs`, `--disk-image` images), its unwind sections read once for every process that
//! maps it, and the process's [`SpaceUnwinder`] built with each file at its load bias.
//!
//! A vCPU thread opens no file (its seccomp filter refuses). With archives alone, which are in
//! memory, the vCPU that reads a process's mappings looks its files up at once. With a sysroot
//! or a disk image, files are read on the `guest-files` thread ([`UnwindFiles::serve`]): a
//! process's unwinder is built with the files already read, its stacks go on by frame pointers
//! where one is still being read, and it is built again as each arrives.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};

use introspect::cfi::{ElfUnwindInfo, SpaceUnwinder};
use report::profile::MappingInfo;
use report::symbols::elf::{build_id, unwind_info, Segments};
use report::symbols::guest_files::GuestFiles;

/// Files whose unwind sections (or their absence) are kept; past it, a new path is read for
/// each process that maps it (from archives) or not at all (from other places).
pub const MAX_FILES: usize = 4096;
/// Processes whose unwinders are kept; past it, a new process's user stacks are unwound by
/// frame pointers.
pub const MAX_PROCESSES: usize = 65_536;

/// A guest file: its path and, where the guest's copy had one, its build id.
type FileKey = (String, Option<String>);

/// The files asked of the `guest-files` thread, for [`UnwindFiles::serve`].
pub struct UnwindRequests(Receiver<FileKey>);

/// One file's unwind sections and where its bytes are linked.
struct UnwindFile {
    info: ElfUnwindInfo,
    segments: Segments,
}

/// A process (its row and executable mappings) whose unwinder waits for a file.
type Waiting = (u32, Arc<[MappingInfo]>);

/// What is known of a file.
#[derive(Clone)]
enum Entry {
    /// Read: None for a file not found (as that build), not ELF, or without CFI.
    Read(Option<Arc<UnwindFile>>),
    /// Asked of the `guest-files` thread.
    Asked,
}

/// The files read and the processes waiting for one.
#[derive(Default)]
struct Files {
    by_path: HashMap<FileKey, Entry>,
    /// A file being read -> the processes to build again when it is.
    waiting: HashMap<FileKey, Vec<Waiting>>,
}

/// The run's places, the files read from them, and each process's unwinder.
#[derive(Default)]
pub struct UnwindFiles {
    places: GuestFiles,
    files: Mutex<Files>,
    /// By process row.
    by_process: RwLock<HashMap<u32, Arc<SpaceUnwinder>>>,
    /// Files for the `guest-files` thread to read: None with archives alone, and once closed.
    reader: Mutex<Option<Sender<FileKey>>>,
}

impl UnwindFiles {
    /// Looks files up in `files`; with a sysroot or a disk image among them, also the
    /// receiver that [`Self::serve`] reads them from, on a thread that may open files.
    pub fn new(files: &GuestFiles) -> (Self, Option<UnwindRequests>) {
        let (reader, requests) = if files.opens_files() {
            let (tx, rx) = channel();
            (Some(tx), Some(UnwindRequests(rx)))
        } else {
            (None, None)
        };
        let unwind = UnwindFiles {
            places: files.clone(),
            reader: Mutex::new(reader),
            ..Default::default()
        };
        (unwind, requests)
    }

    /// True when there is nowhere to look.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// The file the guest calls `key.0`, as the build `key.1` when the guest said which
    /// (another build's rules would unwind the wrong code: the next place is looked in).
    fn read(&self, key: &FileKey) -> Option<Arc<UnwindFile>> {
        let same_build = |bytes: &[u8], _: &_| match (&key.1, build_id(bytes)) {
            (Some(guest), Some(found)) => *guest == found,
            _ => true,
        };
        let (bytes, _) = self
            .places
            .read_accepted(&key.0, files::bounded::SYMBOLS, same_build)?;
        Some(Arc::new(UnwindFile {
            info: unwind_info(&bytes)?,
            segments: Segments::of(&bytes)?,
        }))
    }

    /// The file `key` if it has been read; with archives alone it is read now, else it is
    /// asked of the `guest-files` thread and None returned (with `asked` set).
    fn file(&self, files: &mut Files, key: FileKey, asked: &mut bool) -> Option<Arc<UnwindFile>> {
        match files.by_path.get(&key) {
            Some(Entry::Read(known)) => return known.clone(),
            Some(Entry::Asked) => {
                *asked = true;
                return None;
            }
            None => {}
        }
        let room = files.by_path.len() < MAX_FILES;
        let reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = reader.as_ref() {
            if room && tx.send(key.clone()).is_ok() {
                files.by_path.insert(key, Entry::Asked);
                *asked = true;
            }
            return None;
        }
        drop(reader);
        if self.places.opens_files() {
            // Closed: nothing more is read.
            return None;
        }
        let read = self.read(&key);
        if room {
            files.by_path.insert(key, Entry::Read(read.clone()));
        }
        read
    }

    /// Builds process row `row`'s unwinder from its executable file `mappings` (again each
    /// time they are read, and as each file read on the `guest-files` thread arrives).
    pub fn add_process(&self, row: u32, mappings: &[MappingInfo]) {
        if self.is_empty() {
            return;
        }
        let mut space = SpaceUnwinder::new();
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let mut shared: Option<Arc<[MappingInfo]>> = None;
        for m in mappings {
            let key = (m.path.clone(), m.build_id.clone());
            let mut asked = false;
            let file = self.file(&mut files, key.clone(), &mut asked);
            if asked {
                let maps = shared.get_or_insert_with(|| mappings.into()).clone();
                let rows = files.waiting.entry(key).or_default();
                rows.retain(|(r, _)| *r != row);
                rows.push((row, maps));
            }
            let Some(file) = file else {
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
        drop(files);
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

    /// The `guest-files` thread: reads each file asked for, then builds again the unwinders
    /// of the processes that wait for it; returns once [`Self::close`] was called and what
    /// was asked before is read.
    pub fn serve(&self, requests: UnwindRequests) {
        for key in requests.0 {
            let read = self.read(&key);
            let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
            files.by_path.insert(key.clone(), Entry::Read(read));
            let rows = files.waiting.remove(&key).unwrap_or_default();
            drop(files);
            for (row, mappings) in rows {
                self.add_process(row, &mappings);
            }
        }
    }

    /// No more files are asked for: the `guest-files` thread ends.
    pub fn close(&self) {
        self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
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
        let (files, requests) = UnwindFiles::new(&archive());
        assert!(requests.is_none(), "archives are read on the vCPU thread");
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let (offset, start) = exe_mapping();
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
        let read = files.files.lock().unwrap();
        let by_path = &read.by_path;
        assert_eq!(by_path.len(), 3);
        let known = |path: &str| matches!(by_path[&(path.to_string(), None)], Entry::Read(None));
        assert!(known("/etc/motd") && known("/bin/missing"));
        drop(read);

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

    /// The test binary's executable segment (an ELF with `.eh_frame`) as the loader maps it,
    /// from the page holding its first byte, 1 GiB above where it was linked: its file offset
    /// and start.
    fn exe_mapping() -> (u64, u64) {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let segments = Segments::of(&exe).unwrap();
        let text = unwind_info(&exe).unwrap().text.unwrap().addresses.start;
        let offset = (0..exe.len() as u64)
            .step_by(0x1000)
            .take_while(|&o| segments.linked_address(o).is_some_and(|a| a <= text))
            .last()
            .unwrap();
        (offset, segments.linked_address(offset).unwrap() + (1 << 30))
    }

    #[test]
    fn a_sysroots_files_are_read_on_the_reader_thread_and_the_process_built_again() {
        let root = std::env::temp_dir().join(format!("unwind-sysroot-{}", std::process::id()));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::copy(std::env::current_exe().unwrap(), root.join("bin/prog")).unwrap();
        let (files, requests) = UnwindFiles::new(&GuestFiles::new().with_sysroot(root.clone()));
        let files = Arc::new(files);
        let (offset, start) = exe_mapping();
        // Asked, not read: a vCPU thread opens no file.
        files.add_process(3, &[mapping("/bin/prog", start, offset)]);
        files.add_process(4, &[mapping("/bin/missing", 0x20_0000, 0)]);
        assert!(files.of_process(3).is_none());
        let reader = {
            let files = Arc::clone(&files);
            let requests = requests.expect("a sysroot is read on a thread of its own");
            std::thread::spawn(move || files.serve(requests))
        };
        // What was asked before the close is read, and process 3 built with it.
        files.close();
        reader.join().unwrap();
        let space = files
            .of_process(3)
            .expect("built again once /bin/prog was read");
        assert_eq!(space.ranges().to_vec(), vec![start..start + 0x1000]);
        assert!(files.of_process(4).is_none());
        // Once closed, nothing more is asked or read.
        files.add_process(5, &[mapping("/bin/other", start, offset)]);
        assert!(files.of_process(5).is_none());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn without_places_nothing_is_built() {
        let (files, requests) = UnwindFiles::new(&GuestFiles::new());
        assert!(files.is_empty() && requests.is_none());
        files.add_process(1, &[mapping("/bin/sh", 0x40_0000, 0)]);
        assert!(files.of_process(1).is_none());
    }
}
