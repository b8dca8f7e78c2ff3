//! What stands at an output's path, and so how it is written.
//!
//! An output never replaces what is not a regular file. What is at the path decides:
//!
//! | at the path | written |
//! | --- | --- |
//! | nothing, or a regular file | atomically, beside it, then renamed over it ([`crate::atomic`]) |
//! | a character device (`/dev/null`, a terminal) | through, as a shell's `>` writes it |
//! | a FIFO with a reader | through, streamed to the reader |
//! | a FIFO nobody reads | refused when written, at once (opening it never blocks) |
//! | a directory, a block device, a socket | refused |
//! | a symbolic link | replaced by the rename, its target never touched; but see [`Naming`] |
//!
//! A symbolic link is followed only where the user named the file ([`Naming::Named`]) and
//! only to what a shell's redirection would write into without replacing it: a device or a
//! FIFO (`/dev/stdout` on a pipe or a terminal), or, through `/proc`, a file another
//! process has open (`/dev/stdout` on a redirected file: appended to, as that process's
//! own output is). A link to anything else is replaced, never written through, so a link
//! planted at an output's name cannot make hvprof write over the file it points at.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

pub(crate) use crate::fd::kind_name;
use std::path::{Path, PathBuf};

/// Who chose an output's name, which decides whether a symbolic link there is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// The user named this file (`--junit FILE`, `merge -o FILE`): a link to a device, a
    /// FIFO or a process's open file is written through, as a shell's `>` would.
    Named,
    /// hvprof chose this name inside a directory (`--out DIR`'s files): a link there is
    /// replaced, never followed.
    InDir,
}

/// How an output's path is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Written beside the path, then renamed over it (nothing there, a regular file, or a
    /// link that is replaced).
    Replace,
    /// Opened and written through: a character device, a FIFO with a reader, or a process's
    /// open file named through `/proc`.
    Through,
}

/// Why an output's path cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Something is at the path that an output never replaces or writes into.
    #[error("{} is {kind}: hvprof writes outputs only as regular files or through a device or a FIFO with a reader", .path.display())]
    Refused {
        /// The path.
        path: PathBuf,
        /// What is there ("a directory", "a FIFO nobody reads").
        kind: &'static str,
    },
    /// The path could not be inspected or opened.
    #[error("cannot open {}", .0.display())]
    Open(PathBuf, #[source] std::io::Error),
}

/// The most links followed to find whether a chain passes through `/proc` (the kernel's
/// own limit on a path's links is 40).
const MAX_LINKS: usize = 40;

/// Whether following the link at `path` passes through `/proc` (a process's open file such
/// as `/dev/stdout` -> `/proc/self/fd/1`).
fn leads_through_proc(path: &Path) -> bool {
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let Ok(next) = std::fs::read_link(&at) else {
            return false;
        };
        let next = match at.parent() {
            Some(dir) if next.is_relative() => dir.join(next),
            _ => next,
        };
        if next.starts_with("/proc") {
            return true;
        }
        at = next;
    }
    false
}

/// Decides how `path` is written, without opening or changing anything: see the module
/// documentation. A FIFO's reader is checked when it is opened ([`open_through`]).
pub fn classify(path: &Path, naming: Naming) -> Result<Target, TargetError> {
    let refused = |kind| TargetError::Refused {
        path: path.to_path_buf(),
        kind,
    };
    let here = match std::fs::symlink_metadata(path) {
        Ok(m) => m.file_type(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Replace),
        Err(e) => return Err(TargetError::Open(path.to_path_buf(), e)),
    };
    let t = if here.is_symlink() {
        if naming == Naming::InDir {
            return Ok(Target::Replace);
        }
        match std::fs::metadata(path) {
            // A dangling link, or one that cannot be followed, is replaced.
            Err(_) => return Ok(Target::Replace),
            Ok(m) if m.file_type().is_file() => {
                return Ok(if leads_through_proc(path) {
                    Target::Through
                } else {
                    Target::Replace
                })
            }
            Ok(m) => m.file_type(),
        }
    } else {
        here
    };
    if t.is_file() {
        Ok(Target::Replace)
    } else if t.is_char_device() || t.is_fifo() {
        Ok(Target::Through)
    } else {
        Err(refused(kind_name(t)))
    }
}

/// Opens `path`, classified [`Target::Through`], for writing without blocking: a FIFO
/// nobody reads is refused at once (`ENXIO`), and the opened file is checked again (the
/// path may have changed since it was classified). Writes block again once it is open (a
/// reader sets the pace). A regular file reached through `/proc` is appended to.
pub fn open_through(path: &Path) -> Result<File, TargetError> {
    let file = File::options()
        .append(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => TargetError::Refused {
                path: path.to_path_buf(),
                kind: "a FIFO nobody reads",
            },
            _ => TargetError::Open(path.to_path_buf(), e),
        })?;
    let t = file
        .metadata()
        .map_err(|e| TargetError::Open(path.to_path_buf(), e))?
        .file_type();
    if !(t.is_char_device() || t.is_fifo() || t.is_file()) {
        return Err(TargetError::Refused {
            path: path.to_path_buf(),
            kind: kind_name(t),
        });
    }
    crate::fd::blocking(&file).map_err(|e| TargetError::Open(path.to_path_buf(), e))?;
    Ok(file)
}

/// Proves before any work that `path`, classified [`Target::Through`], takes output: a device
/// is opened (without blocking) and closed again. A FIFO is not: closing the writer end would
/// hand its reader an end of file (`cat FIFO` would exit before the real output came), so
/// whether it has a reader is found when it is written ([`open_through`]: refused at once,
/// never waited on).
pub fn check_through(path: &Path) -> Result<(), TargetError> {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_fifo() => Ok(()),
        _ => open_through(path).map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::{mkfifo, mknod_null, TestDir};
    use std::os::unix::fs::symlink;

    #[test]
    fn files_and_absent_paths_are_replaced() {
        let d = TestDir::new("classify-files");
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(classify(&f, Naming::Named).unwrap(), Target::Replace);
        assert_eq!(
            classify(&d.path().join("absent"), Naming::Named).unwrap(),
            Target::Replace
        );
    }

    #[test]
    fn devices_and_fifos_are_written_through_and_directories_refused() {
        let d = TestDir::new("classify-kinds");
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        assert_eq!(classify(&fifo, Naming::InDir).unwrap(), Target::Through);
        if let Some(null) = mknod_null(&d.path().join("null")) {
            assert_eq!(classify(&null, Naming::InDir).unwrap(), Target::Through);
        }
        let e = classify(d.path(), Naming::Named).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }

    #[test]
    fn a_fifo_nobody_reads_is_refused_without_blocking() {
        let d = TestDir::new("fifo-no-reader");
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let e = open_through(&fifo).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a FIFO nobody reads: hvprof writes outputs only as regular files or \
                 through a device or a FIFO with a reader",
                fifo.display()
            )
        );
    }

    #[test]
    fn checking_a_fifo_leaves_its_reader_waiting_for_the_output() {
        let d = TestDir::new("fifo-reader");
        let fifo = d.path().join("out");
        mkfifo(&fifo);
        let copy = d.path().join("copy");
        // A reader as a shell's `cat FIFO > copy &` is: it reads until the last writer closes.
        let mut cat = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cat {} > {}", fifo.display(), copy.display()))
            .spawn()
            .unwrap();
        // Wait until the reader has the FIFO open (a non-blocking writer's open then works).
        let mut tries = 0;
        while open_through(&fifo).is_err() {
            tries += 1;
            assert!(tries < 1000, "the reader never opened the FIFO");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // That probe's close gave the reader its end of file: start a fresh one.
        cat.wait().unwrap();
        let mut cat = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cat {} > {}", fifo.display(), copy.display()))
            .spawn()
            .unwrap();
        // The check opens nothing, so the reader is still there for the output itself.
        check_through(&fifo).unwrap();
        let mut tries = 0;
        let mut file = loop {
            match open_through(&fifo) {
                Ok(f) => break f,
                Err(e) => {
                    tries += 1;
                    assert!(tries < 1000, "the reader is gone: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        };
        std::io::Write::write_all(&mut file, b"<testsuite/>").unwrap();
        drop(file);
        cat.wait().unwrap();
        assert_eq!(std::fs::read(&copy).unwrap(), b"<testsuite/>");
    }

    #[test]
    fn links_are_followed_only_to_devices_and_fifos_and_only_where_the_user_named_them() {
        let d = TestDir::new("classify-links");
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let to_fifo = d.path().join("to-fifo");
        symlink(&fifo, &to_fifo).unwrap();
        assert_eq!(classify(&to_fifo, Naming::Named).unwrap(), Target::Through);
        assert_eq!(classify(&to_fifo, Naming::InDir).unwrap(), Target::Replace);
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let to_file = d.path().join("to-file");
        symlink(&victim, &to_file).unwrap();
        assert_eq!(classify(&to_file, Naming::Named).unwrap(), Target::Replace);
        let to_dir = d.path().join("to-dir");
        symlink(d.path(), &to_dir).unwrap();
        assert!(classify(&to_dir, Naming::Named).is_err());
        let dangling = d.path().join("dangling");
        symlink(d.path().join("nothing"), &dangling).unwrap();
        assert_eq!(classify(&dangling, Naming::Named).unwrap(), Target::Replace);
    }

    #[test]
    fn a_link_through_proc_to_a_file_is_written_through() {
        let d = TestDir::new("classify-proc");
        let f = File::create(d.path().join("open")).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let link = d.path().join("stdout");
        symlink(format!("/proc/self/fd/{fd}"), &link).unwrap();
        assert_eq!(classify(&link, Naming::Named).unwrap(), Target::Through);
        assert_eq!(classify(&link, Naming::InDir).unwrap(), Target::Replace);
    }
}
