//! Opening the image a `--disk` names: the file, its lock, its format (given, or detected
//! from the first bytes) and the backend that serves it: the raw file itself, a qcow2 image
//! with its backing chain ([`super::qcow2`]), or, with `,snapshot`, a temporary qcow2 overlay
//! over the image opened read-only ([`super::snapshot`]).
//!
//! Everything here happens before the VM starts (and before any thread's system-call filter),
//! so it may open and create files.

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::disk::{DiskBackend, DiskConfig, DiskError, DiskFormat, DiskImage, SECTOR_SIZE};
use super::file::{check_qcow2_header, encrypted, lock, open_file};
use super::qcow2_header::QCOW2_MAGIC;
use super::{qcow2, snapshot};

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

#[cfg(test)]
mod tests;
