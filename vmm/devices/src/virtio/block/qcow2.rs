//! qcow2 images and their backing chains, through the imago library in its synchronous build
//! (no async runtime: requests are served on the event-loop or vCPU thread that was notified,
//! as for raw images).
//!
//! imago parses the headers, tables and refcounts, after hvprof's own checks of each qcow2
//! header of the chain and the refcounts of the metadata it names ([`super::qcow2_header`],
//! [`super::qcow2_refcounts`]); hvprof decides which files may be opened. Every backing file
//! goes through [`ChainGate`], which opens it read-only (so no write can reach it), takes a
//! shared lock on it, resolves relative names against the directory of the image that names
//! them (imago does that), refuses a file already in the chain (a loop), an encrypted image, a
//! qcow2 header the checks refuse and a chain longer than [`MAX_CHAIN`], and remembers why it
//! refused, so the error names the file. External data files are refused.

use std::cell::RefCell;
use std::fs::{File, TryLockError};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use imago::file::File as ImagoFile;
use imago::format::gate::ImplicitOpenGate;
use imago::qcow2::Qcow2;
use imago::raw::Raw;
use imago::{
    DenyImplicitOpenGate, FormatAccess, FormatCreateBuilder, FormatDriverBuilder,
    StorageOpenOptions,
};

use super::disk::{write_zero_bytes, DiskBackend, DiskError, DiskFormat};
use super::file::{check_qcow2_header, encrypted, lock, open_file};
use super::qcow2_header::QCOW2_MAGIC;

/// Most files in a chain, the image included.
pub const MAX_CHAIN: usize = 64;

/// An image opened through imago.
pub type Access = FormatAccess<ImagoFile>;

/// A qcow2 image (or a snapshot overlay) as a block device backend.
pub struct Qcow2Disk {
    access: Access,
    /// FLUSH syncs the file (not for a snapshot's overlay, which is thrown away).
    durable: bool,
}

impl Qcow2Disk {
    /// A backend over `access`; `durable`: FLUSH makes the writes durable.
    pub(super) fn new(access: Access, durable: bool) -> Self {
        Qcow2Disk { access, durable }
    }

    /// The virtual disk size in bytes.
    pub fn size(&self) -> u64 {
        self.access.size()
    }

    /// Where a last cluster that the disk covers only in part starts (the size if none).
    fn partial_tail(&self) -> u64 {
        let size = self.size();
        match self.access.inner().zero_granularity() {
            Some(g) if g > 0 && !size.is_multiple_of(g) => size - size % g,
            _ => size,
        }
    }
}

impl DiskBackend for Qcow2Disk {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.access.read(buf, offset)
    }

    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.access.write(buf, offset)
    }

    /// Writes the cached tables back, then (for an image that outlives the run) syncs.
    fn flush(&mut self) -> io::Result<()> {
        self.access.flush()?;
        if self.durable {
            self.access.sync()?;
        }
        Ok(())
    }

    /// Frees whole clusters where it can (the backing file may show through); a format that
    /// cannot discard keeps the data.
    fn discard(&mut self, offset: u64, len: u64) -> io::Result<()> {
        match self.access.discard_to_any(offset, len) {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(()),
            other => other,
        }
    }

    /// Zero clusters (deallocated when `unmap`); what is not whole clusters is written. A
    /// last cluster that the disk covers only in part is written with zeroes by hvprof:
    /// imago 0.2.6's zeroing underflows there when the disk is smaller than a cluster.
    fn write_zeroes(&mut self, offset: u64, len: u64, unmap: bool) -> io::Result<()> {
        let end = offset.checked_add(len).ok_or(io::ErrorKind::InvalidInput)?;
        let tail = self.partial_tail();
        if offset < tail {
            let n = end.min(tail) - offset;
            if unmap {
                self.access.discard_to_zero(offset, n)?;
            } else {
                self.access.write_zeroes(offset, n)?;
            }
        }
        let from = offset.max(tail);
        if from < end {
            write_zero_bytes(self, from, end - from)?;
        }
        Ok(())
    }

    fn close(&mut self) -> io::Result<()> {
        self.flush()
    }
}

/// Opens the qcow2 image `file` (at `path`, already locked) and its backing chain.
pub(super) fn open(file: File, path: &Path, writable: bool) -> Result<Qcow2Disk, DiskError> {
    let access = open_chain(file, path, writable)?;
    Ok(Qcow2Disk::new(access, writable))
}

/// Opens the image under a snapshot overlay, read-only, in `format`.
pub(super) fn open_base(file: File, path: &Path, format: DiskFormat) -> Result<Access, DiskError> {
    match format {
        DiskFormat::Qcow2 => open_chain(file, path, false),
        DiskFormat::Raw => {
            let storage = storage(file, path, false).map_err(|e| open_err(path, e))?;
            Raw::builder(storage)
                .write(false)
                .open(DenyImplicitOpenGate::default())
                .map(FormatAccess::new)
                .map_err(|e| open_err(path, e))
        }
    }
}

/// Makes an empty qcow2 image of `size` bytes at `path` (64 KiB clusters, no backing file),
/// replacing any file there.
pub fn create_qcow2(path: &Path, size: u64) -> io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let storage = storage(file, path, true)?;
    Qcow2::<ImagoFile>::create_builder(storage)
        .size(size)
        .create()
}

fn open_err(path: &Path, e: io::Error) -> DiskError {
    DiskError::Open(path.to_owned(), e)
}

/// `file` as imago storage that knows its name (for relative backing names).
fn storage(file: File, path: &Path, writable: bool) -> io::Result<ImagoFile> {
    ImagoFile::from_open_file(
        file,
        StorageOpenOptions::new().write(writable).filename(path),
    )
}

fn open_chain(file: File, path: &Path, writable: bool) -> Result<Access, DiskError> {
    let meta = file.metadata().map_err(|e| open_err(path, e))?;
    let gate = ChainGate::new(path, (meta.dev(), meta.ino()));
    let storage = storage(file, path, writable).map_err(|e| open_err(path, e))?;
    let opened = Qcow2::<ImagoFile>::builder(storage)
        .write(writable)
        .open(gate.clone());
    match opened {
        Ok(q) => Ok(FormatAccess::new(q)),
        Err(e) => Err(gate
            .take_error()
            .unwrap_or_else(|| DiskError::Qcow2(path.to_owned(), e))),
    }
}

/// What the gate has opened so far, and why it refused, if it did.
struct Chain {
    /// Device and inode of every file in the chain, the image first.
    files: Vec<(u64, u64)>,
    /// The first refusal.
    error: Option<DiskError>,
}

/// Decides which implicitly referenced files imago may open (see the module's comment).
#[derive(Clone)]
struct ChainGate {
    /// The image the user named, for errors.
    image: PathBuf,
    chain: Rc<RefCell<Chain>>,
}

impl ChainGate {
    fn new(image: &Path, id: (u64, u64)) -> Self {
        ChainGate {
            image: image.to_owned(),
            chain: Rc::new(RefCell::new(Chain {
                files: vec![id],
                error: None,
            })),
        }
    }

    fn take_error(&self) -> Option<DiskError> {
        self.chain.borrow_mut().error.take()
    }

    /// Records `e` (the first refusal wins: it is the cause of the rest) and returns an
    /// error for imago to pass up.
    fn refuse(&self, e: DiskError) -> io::Error {
        let msg = e.to_string();
        self.chain.borrow_mut().error.get_or_insert(e);
        io::Error::new(io::ErrorKind::PermissionDenied, msg)
    }

    /// Opens the backing file at `path` read-only, refuses it if it is already in the chain
    /// or the chain is full, and takes a shared lock on it.
    fn open_backing(&self, path: &Path) -> Result<File, DiskError> {
        let image = &self.image;
        let (file, meta) = open_file(path, false).map_err(|e| match e {
            DiskError::Open(p, e) => DiskError::Backing(image.clone(), p, e),
            DiskError::NotAFile(p) => DiskError::Backing(
                image.clone(),
                p,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a regular file or block device",
                ),
            ),
            other => other,
        })?;
        let mut chain = self.chain.borrow_mut();
        let id = (meta.dev(), meta.ino());
        if chain.files.contains(&id) {
            return Err(DiskError::BackingLoop(image.clone(), path.to_owned()));
        }
        if chain.files.len() >= MAX_CHAIN {
            return Err(DiskError::ChainTooLong(image.clone(), MAX_CHAIN));
        }
        lock(&file, path, true).map_err(|e| match e {
            TryLockError::WouldBlock => DiskError::BackingLocked(image.clone(), path.to_owned()),
            TryLockError::Error(e) => DiskError::Backing(image.clone(), path.to_owned(), e),
        })?;
        match encrypted(&file) {
            Ok(false) => {}
            Ok(true) => return Err(DiskError::Encrypted(image.clone(), path.to_owned())),
            Err(e) => return Err(DiskError::Backing(image.clone(), path.to_owned(), e)),
        }
        if is_qcow2(&file).map_err(|e| DiskError::Backing(image.clone(), path.to_owned(), e))? {
            check_qcow2_header(&file, image, path)?;
        }
        chain.files.push(id);
        Ok(file)
    }
}

/// Whether `file` starts with the qcow2 magic. A backing file named as raw that does is
/// checked as qcow2 too, and refused if its header is not one hvprof accepts.
fn is_qcow2(file: &File) -> io::Result<bool> {
    let mut magic = [0u8; 4];
    match file.read_exact_at(&mut magic, 0) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
        Ok(()) => Ok(magic == QCOW2_MAGIC),
    }
}

impl ImplicitOpenGate<ImagoFile> for ChainGate {
    /// A backing image: read-only, its own backing files through this gate.
    fn open_format<F: FormatDriverBuilder<ImagoFile>>(&mut self, builder: F) -> io::Result<Access> {
        let driver = builder.write(false).open(self.clone())?;
        Ok(FormatAccess::new(driver))
    }

    /// A backing file (imago asks read-only) or an external data file (it asks read-write:
    /// refused).
    fn open_storage(&mut self, opts: StorageOpenOptions) -> io::Result<ImagoFile> {
        let Some(path) = opts.get_filename().map(Path::to_owned) else {
            return Err(self.refuse(DiskError::Qcow2(
                self.image.clone(),
                io::Error::other("a backing file without a name"),
            )));
        };
        if opts.get_writable() {
            return Err(self.refuse(DiskError::ExternalData(self.image.clone())));
        }
        let file = self.open_backing(&path).map_err(|e| self.refuse(e))?;
        storage(file, &path, false)
            .map_err(|e| self.refuse(DiskError::Backing(self.image.clone(), path, e)))
    }
}

#[cfg(test)]
pub(super) mod tests;
