//! The one way hvprof opens a file a user names (a kernel, an initrd, firmware, a symbol
//! file, a saved profile): it never blocks and never reads without bound.
//!
//! Anything but a regular file (a FIFO, a character device such as /dev/zero, a
//! directory...) is refused by kind, and a size above the input's [`Limit`] is refused before
//! a byte is read: checked on the path before it is opened, and with `fstat` on the open file.
//! It is opened with `O_NONBLOCK | O_CLOEXEC | O_NOCTTY`, so even a FIFO put in its place
//! between the two checks cannot block the open. At most limit + 1 bytes are read, so a
//! file that grows while it is read is refused too, never read to the end of memory.
//!
//! The limits (docs/profiling.md, "Inputs"):
//!
//! | input | limit |
//! | --- | --- |
//! | `--kernel` | [`KERNEL`]: 1 GiB (a vmlinux with full debug info is a few hundred MiB) |
//! | `--initrd` | [`INITRD`]: 1 GiB |
//! | `--firmware`, `--vars` | [`FIRMWARE`]: 16 MiB (the flash area below 4 GiB) |
//! | `--symbols`, PDBs and images from a symbol path | [`SYMBOLS`]: 4 GiB |
//! | a saved profile.json (report, compare, merge) | [`PROFILE`]: 1 GiB |
//! | a saved timeline.json beside it | [`TIMELINE`]: 1 GiB |
//!
//! A reader that knows its formats looks at the file's first bytes ([`head`]) before it
//! reads the rest, so a file of no accepted format is refused at the cost of a few bytes
//! however large it is.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The most bytes hvprof reads from one kind of input, and what to call that input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// What the input is, for messages ("a kernel image").
    pub what: &'static str,
    /// Its largest accepted size in bytes.
    pub max: u64,
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A kernel image (`--kernel`).
pub const KERNEL: Limit = Limit {
    what: "a kernel image",
    max: GIB,
};
/// An initial RAM disk (`--initrd`).
pub const INITRD: Limit = Limit {
    what: "an initrd",
    max: GIB,
};
/// A firmware ROM, a pflash CODE or VARS image (`--firmware`, `--vars`): the flash area below
/// 4 GiB holds 16 MiB.
pub const FIRMWARE: Limit = Limit {
    what: "a firmware image",
    max: 16 * MIB,
};
/// An image or PDB to symbolize with (`--symbols`, and the files a symbol path finds).
pub const SYMBOLS: Limit = Limit {
    what: "a symbol file",
    max: 4 * GIB,
};
/// A saved profile.json (`hvprof report`, `compare`, `merge`).
pub const PROFILE: Limit = Limit {
    what: "a saved profile",
    max: GIB,
};

/// A saved timeline.json, read with the profile.json beside it.
pub const TIMELINE: Limit = Limit {
    what: "a saved timeline",
    max: GIB,
};

impl std::fmt::Display for Limit {
    /// "the 1 GiB limit for a kernel image"
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} limit for {}", human(self.max), self.what)
    }
}

/// `n` bytes in the largest binary unit that divides it (1 GiB, 16 MiB, 4097-byte).
fn human(n: u64) -> String {
    match n {
        n if n.is_multiple_of(GIB) => format!("{} GiB", n / GIB),
        n if n.is_multiple_of(MIB) => format!("{} MiB", n / MIB),
        n => format!("{n}-byte"),
    }
}

/// Why an input file was refused. All of these are the user's to mend.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be opened or inspected.
    #[error("cannot open {}", .0.display())]
    Open(PathBuf, #[source] std::io::Error),
    /// The path names something other than a regular file.
    #[error("{} is {kind}, not a regular file", .path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead ("a FIFO").
        kind: &'static str,
    },
    /// The file is larger than its limit; nothing was read.
    #[error("{} is {size} bytes, above {limit}", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size when it was opened.
        size: u64,
        /// The limit it is above.
        limit: Limit,
    },
    /// The file grew past its limit while it was read.
    #[error("{} grew past {limit} while it was read", .path.display())]
    Grew {
        /// The file.
        path: PathBuf,
        /// The limit it grew past.
        limit: Limit,
    },
    /// Reading failed.
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
}

/// What a file type is, in words, for anything that is not a regular file.
fn kind_of(t: std::fs::FileType) -> Option<&'static str> {
    (!t.is_file()).then(|| crate::fd::kind_name(t))
}

/// Refuses `meta` unless it is a regular file of at most `limit` bytes.
fn check(path: &Path, meta: &std::fs::Metadata, limit: Limit) -> Result<(), InputError> {
    if let Some(kind) = kind_of(meta.file_type()) {
        return Err(InputError::NotRegular {
            path: path.to_owned(),
            kind,
        });
    }
    if meta.len() > limit.max {
        return Err(InputError::TooLarge {
            path: path.to_owned(),
            size: meta.len(),
            limit,
        });
    }
    Ok(())
}

/// Opens `path` without blocking (read-only, or read-write with `writable`) and checks that
/// it is a regular file of at most `limit` bytes. Returns the file and its size.
///
/// The path is checked before it is opened, so that a device is never opened at all (opening
/// one can have effects: a serial line raises its modem lines, a tape rewinds), and the open
/// file again, for a path replaced in between. `O_NOCTTY`: a terminal never becomes
/// hvprof's controlling terminal.
pub fn open(path: &Path, limit: Limit, writable: bool) -> Result<(File, u64), InputError> {
    let open_error = |e| InputError::Open(path.to_owned(), e);
    check(path, &std::fs::metadata(path).map_err(open_error)?, limit)?;
    let file = OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(open_error)?;
    let meta = file.metadata().map_err(open_error)?;
    check(path, &meta, limit)?;
    Ok((file, meta.len()))
}

/// Reads `file` (opened by [`open`] as `path`, `size` bytes then) from where it stands, at
/// most `limit` bytes: a file that has grown past the limit is refused.
pub fn read_from(file: &File, path: &Path, size: u64, limit: Limit) -> Result<Vec<u8>, InputError> {
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| InputError::Read(path.to_owned(), e))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit.max {
        return Err(InputError::Grew {
            path: path.to_owned(),
            limit,
        });
    }
    Ok(bytes)
}

/// The first `n` bytes of `file` (opened by [`open`] as `path`), fewer if it is shorter;
/// read at offset 0 without moving the file's position, so [`read_from`] still reads it
/// whole.
pub fn head(file: &File, path: &Path, n: usize) -> Result<Vec<u8>, InputError> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        let at = u64::try_from(got).unwrap_or(u64::MAX);
        match file.read_at(&mut buf[got..], at) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(InputError::Read(path.to_owned(), e)),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Reads the regular file at `path` whole, if it is at most `limit` bytes.
pub fn read(path: &Path, limit: Limit) -> Result<Vec<u8>, InputError> {
    let (file, size) = open(path, limit, false)?;
    read_from(&file, path, size, limit)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;

    use super::*;
    use crate::testdir::TestDir;

    /// A path `name` in a fresh directory, removed when the guard is dropped.
    fn temp(name: &str) -> (TestDir, PathBuf) {
        let dir = TestDir::new(&format!("bounded-{name}"));
        let p = dir.path().join(name);
        (dir, p)
    }

    const SMALL: Limit = Limit {
        what: "a test input",
        max: 8,
    };

    #[test]
    fn a_regular_file_within_its_limit_reads_whole() {
        let (_p, p) = temp("ok");
        std::fs::write(&p, b"12345678").unwrap();
        assert_eq!(read(&p, SMALL).unwrap(), b"12345678");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_file_above_its_limit_is_refused_naming_it_and_the_limit() {
        let (_p, p) = temp("big");
        std::fs::write(&p, b"123456789").unwrap();
        let e = read(&p, SMALL).unwrap_err();
        assert!(matches!(e, InputError::TooLarge { size: 9, .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("big is 9 bytes, above the 8-byte limit for a test input"));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_sparse_file_above_the_limit_is_refused_before_reading() {
        // 1 TiB of holes: reading it would take hours, refusing it takes an fstat.
        let (_p, p) = temp("sparse");
        File::create(&p).unwrap().set_len(1 << 40).unwrap();
        let e = read(&p, KERNEL).unwrap_err();
        assert!(
            e.to_string()
                .contains("above the 1 GiB limit for a kernel image"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_file_that_grows_is_read_no_further_than_the_limit() {
        let (_p, p) = temp("grows");
        std::fs::write(&p, b"1234").unwrap();
        let (file, size) = open(&p, SMALL, false).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"56789abcdef")
            .unwrap();
        let e = read_from(&file, &p, size, SMALL).unwrap_err();
        assert!(matches!(e, InputError::Grew { .. }), "{e:?}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn devices_directories_and_fifos_are_refused_by_kind() {
        let e = read(Path::new("/dev/zero"), KERNEL).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero is a character device, not a regular file"
        );
        let e = read(&std::env::temp_dir(), KERNEL).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a directory, not a regular file"),
            "{e}"
        );
        let (_fifo, fifo) = temp("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Nobody writes to it: a blocking open would never return.
        let e = read(&fifo, KERNEL).unwrap_err();
        assert!(
            e.to_string().ends_with("is a FIFO, not a regular file"),
            "{e}"
        );
        std::fs::remove_file(&fifo).unwrap();
    }

    #[test]
    fn a_missing_file_is_an_open_error_naming_it() {
        let e = read(Path::new("/nonexistent/k"), KERNEL).unwrap_err();
        assert_eq!(e.to_string(), "cannot open /nonexistent/k");
    }

    #[test]
    fn limits_read_as_words() {
        assert_eq!(PROFILE.to_string(), "the 1 GiB limit for a saved profile");
        assert_eq!(human(16 * MIB), "16 MiB");
        assert_eq!(human(4097), "4097-byte");
    }

    #[test]
    fn head_reads_the_first_bytes_and_leaves_the_file_to_read_whole() {
        let (_p, p) = temp("head");
        std::fs::write(&p, b"12345678").unwrap();
        let (file, size) = open(&p, SMALL, false).unwrap();
        assert_eq!(head(&file, &p, 3).unwrap(), b"123");
        assert_eq!(head(&file, &p, 64).unwrap(), b"12345678");
        assert_eq!(read_from(&file, &p, size, SMALL).unwrap(), b"12345678");
        std::fs::remove_file(&p).unwrap();
    }
}
