//! Opening the image a `--disk` names: the file, its lock, its format (given, or detected
//! from the first bytes) and the backend that serves it: the raw file itself, a qcow2 image
//! with its backing chain ([`super::qcow2`]), or, with `,snapshot`, a temporary qcow2 overlay
//! over the image opened read-only ([`super::snapshot`]).
//!
//! Everything here happens before the VM starts (and before any thread's system-call filter),
//! so it may open and create files.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use vmm_sys_util::errno::Error as Errno;

use super::disk::{DiskBackend, DiskError, DiskImage, QCOW2_MAGIC, SECTOR_SIZE};
use super::{qcow2, qcow2_header, qcow2_refcounts, snapshot};
use crate::config::{DiskConfig, DiskFormat};

impl DiskImage {
    /// Opens the image `config` names: read-write unless it is read-only or a snapshot, in
    /// the format given or detected.
    pub fn open(config: &DiskConfig) -> Result<Self, DiskError> {
        let path = &config.path;
        let writable = config.writes_image();
        let (mut file, meta) = open_locked(path, writable, |e| match e {
            TryLockError::WouldBlock => DiskError::Locked(path.clone(), !writable),
            TryLockError::Error(e) => DiskError::Open(path.clone(), e),
        })?;
        let found = detect(&mut file).map_err(|e| DiskError::Open(path.clone(), e))?;
        if encrypted(&file).map_err(|e| DiskError::Open(path.clone(), e))? {
            return Err(DiskError::Encrypted(path.clone(), path.clone()));
        }
        if let Some(given) = config.format {
            if given != found {
                return Err(DiskError::Format(path.clone(), given, found));
            }
        }
        if found == DiskFormat::Qcow2 {
            check_qcow2_header(&file, path, path)?;
        }
        let (backend, len): (Box<dyn DiskBackend>, u64) = match (found, config.snapshot) {
            (DiskFormat::Raw, false) => {
                let len = file
                    .seek(SeekFrom::End(0))
                    .map_err(|e| DiskError::Open(path.clone(), e))?;
                (Box::new(file), len)
            }
            (DiskFormat::Qcow2, false) => {
                let disk = qcow2::open(file, path, writable)?;
                let len = disk.size();
                (Box::new(disk), len)
            }
            (format, true) => {
                let base = qcow2::open_base(file, path, format)?;
                let overlay = snapshot::overlay(base, path)?;
                let len = overlay.size();
                (Box::new(overlay), len)
            }
        };
        if len < SECTOR_SIZE {
            return Err(DiskError::TooSmall(path.clone(), len));
        }
        if !len.is_multiple_of(SECTOR_SIZE) {
            log::warn!(
                "disk image {}: {len} bytes is not a whole number of sectors; the last {} bytes are not reachable",
                path.display(),
                len % SECTOR_SIZE
            );
        }
        let id = format!("hvprof{:x}-{:x}", meta.dev(), meta.ino());
        Ok(DiskImage::new(backend, len, config.readonly, &id))
    }
}

/// Opens `path` (for writing if `writable`), checks that it is a regular file or block device
/// and takes its lock: exclusive if `writable`, shared otherwise. A lock that cannot be taken
/// becomes the error `locked` makes of it.
fn open_locked(
    path: &Path,
    writable: bool,
    locked: impl FnOnce(TryLockError) -> DiskError,
) -> Result<(File, std::fs::Metadata), DiskError> {
    let (file, meta) = open_file(path, writable)?;
    lock(&file, path, !writable).map_err(locked)?;
    Ok((file, meta))
}

/// Opens `path` (for writing if `writable`) and checks that it is a regular file or block
/// device. The open does not block: it is non-blocking until the check has passed, so a
/// FIFO (whose open waits for a writer) or a device is refused at once.
pub(super) fn open_file(
    path: &Path,
    writable: bool,
) -> Result<(File, std::fs::Metadata), DiskError> {
    let open_err = |e| DiskError::Open(path.to_owned(), e);
    let file = OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    let kind = meta.file_type();
    if !(kind.is_file() || kind.is_block_device()) {
        return Err(DiskError::NotAFile(path.to_owned()));
    }
    blocking(&file).map_err(open_err)?;
    Ok((file, meta))
}

/// Clears O_NONBLOCK on `file`.
fn blocking(file: &File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL only reads the flags of a descriptor `file` owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(Errno::last().into());
    }
    // SAFETY: F_SETFL sets the flags of a descriptor `file` owns; only O_NONBLOCK changes.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(Errno::last().into());
    }
    Ok(())
}

/// hvprof's own check of the qcow2 header of `file` ([`qcow2_header::check`]) and of the
/// refcounts of the metadata it names ([`qcow2_refcounts::check`]), the image `image` or, at
/// `path`, a file of its backing chain; before imago reads anything else.
pub(super) fn check_qcow2_header(file: &File, image: &Path, path: &Path) -> Result<(), DiskError> {
    let io_err = |e| {
        if image == path {
            DiskError::Open(path.to_owned(), e)
        } else {
            DiskError::Backing(image.to_owned(), path.to_owned(), e)
        }
    };
    let len = (&*file).seek(SeekFrom::End(0)).map_err(io_err)?;
    let want = usize::try_from(len).map_or(qcow2_header::HEADER_BYTES, |l| {
        l.min(qcow2_header::HEADER_BYTES)
    });
    let mut bytes = vec![0u8; want];
    file.read_exact_at(&mut bytes, 0).map_err(io_err)?;
    let read = |offset: u64, buf: &mut [u8]| read_zero_filled(file, offset, buf);
    qcow2_refcounts::check(&bytes, len, &read)
        .map_err(io_err)?
        .map_err(|e| DiskError::Header(image.to_owned(), path.to_owned(), e))
}

/// Reads `buf` at `offset` of `file`, zeroes where the file ends (as QEMU reads a table
/// that ends inside the file's last, partly written cluster).
fn read_zero_filled(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let at = offset.saturating_add(u64::try_from(got).unwrap_or(u64::MAX));
        match file.read_at(&mut buf[got..], at) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[got..].fill(0);
    Ok(())
}

/// The format the first bytes of `file` show: qcow2 if they are its magic, raw otherwise.
fn detect(file: &mut File) -> std::io::Result<DiskFormat> {
    let mut magic = [0u8; 4];
    file.seek(SeekFrom::Start(0))?;
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(if got == magic.len() && magic == QCOW2_MAGIC {
        DiskFormat::Qcow2
    } else {
        DiskFormat::Raw
    })
}

/// Whether `file` is a qcow2 image whose `crypt_method` (header bytes 32-35, big-endian) is
/// not 0: AES or LUKS encrypted. imago 0.2.6 neither decrypts nor refuses such an image, so
/// the guest would read ciphertext and its writes would corrupt the image. Two fields at fixed
/// offsets are the only image bytes hvprof reads itself; imago parses the rest.
pub(super) fn encrypted(file: &File) -> std::io::Result<bool> {
    let mut header = [0u8; 36];
    match file.read_exact_at(&mut header, 0) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
        Ok(()) => Ok(header[..4] == QCOW2_MAGIC && header[32..] != [0; 4]),
    }
}

/// Takes the image's lock: shared for a read-only image, exclusive otherwise. A file system
/// without locks (ENOLCK, EOPNOTSUPP) is used unlocked, with a warning.
pub(super) fn lock(file: &File, path: &Path, shared: bool) -> Result<(), TryLockError> {
    let taken = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match taken {
        Err(TryLockError::Error(e))
            if matches!(e.raw_os_error(), Some(libc::ENOLCK | libc::EOPNOTSUPP)) =>
        {
            log::warn!(
                "disk image {}: the file system cannot lock it ({e}); using it unlocked",
                path.display()
            );
            Ok(())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests;
