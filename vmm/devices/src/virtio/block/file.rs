//! Opening the files of a disk image: without blocking (a FIFO or a device is refused at
//! once), with the image's lock, and with hvprof's own checks of a qcow2 header before imago
//! reads the file. Used by image.rs for the image and by qcow2.rs for every backing file.

use std::fs::{File, TryLockError};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use files::stream::{open_image, StreamError};

use super::disk::DiskError;
use super::qcow2_header::{self, QCOW2_MAGIC};
use super::qcow2_refcounts;

/// Opens `path` (for writing if `writable`) and checks that it is a regular file or block
/// device ([`files::stream::open_image`]): a FIFO (whose open waits for a writer) or a
/// character device is refused at once.
pub(super) fn open_file(
    path: &Path,
    writable: bool,
) -> Result<(File, std::fs::Metadata), DiskError> {
    open_image(path, writable).map_err(|e| match e {
        StreamError::Open(p, e) => DiskError::Open(p, e),
        _ => DiskError::NotAFile(path.to_owned()),
    })
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
