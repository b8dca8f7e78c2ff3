//! `--disk IMAGE,snapshot`: the image (raw, or qcow2 with its backing chain) is opened
//! read-only and becomes the backing image of a new qcow2 overlay in the temporary directory
//! (`$TMPDIR`, else /tmp). The guest reads through the overlay and writes into it; the overlay
//! is an unnamed file (`O_TMPFILE`, or a named one removed at once where the file system
//! cannot make unnamed files), so it disappears when the run ends, however it ends, and the
//! image is never written.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use imago::file::File as ImagoFile;
use imago::qcow2::Qcow2;
use imago::{DenyImplicitOpenGate, FormatAccess, FormatCreateBuilder, StorageOpenOptions};

use super::disk::{DiskError, SECTOR_SIZE};
use super::qcow2::{Access, Qcow2Disk};

/// A temporary overlay over `base` (the image at `image`, opened read-only), of the same
/// size rounded down to whole sectors.
pub(super) fn overlay(base: Access, image: &Path) -> Result<Qcow2Disk, DiskError> {
    let dir = std::env::temp_dir();
    let err = |e| DiskError::Overlay(image.to_owned(), dir.clone(), e);
    let size = base.size() - base.size() % SECTOR_SIZE;
    let file = unnamed_file(&dir).map_err(err)?;
    let storage =
        ImagoFile::from_open_file(file, StorageOpenOptions::new().write(true)).map_err(err)?;
    let overlay = Qcow2::<ImagoFile>::create_builder(storage)
        .size(size)
        .create_open(DenyImplicitOpenGate::default(), |s| {
            Ok(Qcow2::builder(s).backing(Some(base)))
        })
        .map_err(err)?;
    Ok(Qcow2Disk::new(FormatAccess::new(overlay), false))
}

/// A new read-write file in `dir` that no name refers to.
fn unnamed_file(dir: &Path) -> io::Result<File> {
    let unnamed = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir);
    match unnamed {
        Ok(f) => return Ok(f),
        // The file system (or kernel) cannot make unnamed files.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {}
        Err(e) => return Err(e),
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let path = dir.join(format!(
        ".hvprof-overlay-{}-{stamp:x}.qcow2",
        std::process::id()
    ));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(f)
}
