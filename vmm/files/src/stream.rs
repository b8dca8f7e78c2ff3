//! Files that are not written whole: logs streamed while a guest runs (`--serial FILE`,
//! `--debugcon FILE`) and disk images read and written in place. Both are opened without
//! blocking, checked, and only then made blocking.

use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a log or an image could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Opening or inspecting the file failed.
    #[error("cannot open {}", .0.display())]
    Open(PathBuf, #[source] std::io::Error),
    /// The path is a symbolic link, which a log is never written through.
    #[error("{} is a symbolic link: hvprof writes no log through a link it did not make", .0.display())]
    Link(PathBuf),
    /// The path is a FIFO with no reader: the run would wait for one.
    #[error("{} is a FIFO nobody is reading", .0.display())]
    NoReader(PathBuf),
    /// The path is something an image cannot be.
    #[error("{} is {kind}, not a regular file or a block device", .path.display())]
    NotAnImage {
        /// The path.
        path: PathBuf,
        /// What it is ("a FIFO").
        kind: &'static str,
    },
}

pub use crate::fd::blocking;

/// Opens a log written while the guest runs: created or truncated, streamed (so not renamed
/// into place as results are), never written through a symbolic link (a planted link
/// cannot redirect it) and never waited on (a FIFO nobody reads is refused instead of
/// blocking the start of the run). A device or a FIFO with a reader is written through.
pub fn log(path: &Path) -> Result<File, StreamError> {
    let file = File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => StreamError::Link(path.to_owned()),
            Some(libc::ENXIO) => StreamError::NoReader(path.to_owned()),
            _ => StreamError::Open(path.to_owned(), e),
        })?;
    // Writes block again (a pipe's reader sets the pace, as on a terminal).
    blocking(&file).map_err(|e| StreamError::Open(path.to_owned(), e))?;
    Ok(file)
}

/// Opens a disk image (for writing if `writable`) and checks that it is a regular file or a
/// block device. The open does not block: a FIFO (whose open waits for a writer) or a
/// character device is refused at once; the file blocks again once checked.
pub fn open_image(path: &Path, writable: bool) -> Result<(File, Metadata), StreamError> {
    let open_err = |e| StreamError::Open(path.to_owned(), e);
    let file = OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    let kind = meta.file_type();
    if !(kind.is_file() || kind.is_block_device()) {
        return Err(StreamError::NotAnImage {
            path: path.to_owned(),
            kind: crate::fd::kind_name(kind),
        });
    }
    blocking(&file).map_err(open_err)?;
    Ok((file, meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::{mkfifo, TestDir};
    use std::io::Write;

    #[test]
    fn a_log_is_never_written_through_a_link_nor_waits_for_a_reader() {
        let d = TestDir::new("log");
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = d.path().join("serial.log");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(log(&link), Err(StreamError::Link(_))));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let e = log(&fifo).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{} is a FIFO nobody is reading", fifo.display())
        );
        let plain = d.path().join("plain.log");
        std::fs::write(&plain, b"old contents").unwrap();
        log(&plain).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&plain).unwrap(), b"new");
    }

    #[test]
    fn an_image_is_a_regular_file_or_a_block_device() {
        let d = TestDir::new("image");
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let e = open_image(&fifo, false).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a FIFO, not a regular file or a block device"),
            "{e}"
        );
        let e = open_image(d.path(), false).unwrap_err();
        assert!(
            matches!(
                e,
                StreamError::NotAnImage {
                    kind: "a directory",
                    ..
                }
            ),
            "{e:?}"
        );
        let img = d.path().join("disk.img");
        std::fs::write(&img, [0u8; 512]).unwrap();
        let (_, meta) = open_image(&img, true).unwrap();
        assert_eq!(meta.len(), 512);
    }
}
