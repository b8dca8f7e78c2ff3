//! Disk images: the backend trait the block device reads and writes through, the raw-file
//! backend, and the errors of opening an image (opening itself, with format detection, qcow2
//! chains and snapshots, is in [`super::image`]).
//!
//! Capacity is the image's size (a qcow2 image's virtual size) rounded down to whole 512-byte
//! sectors. The tail of a raw image whose size is not a multiple of 512 is unreachable:
//! requests that touch it are out of range and fail with VIRTIO_BLK_S_IOERR (a warning says so
//! when the image is opened). An image smaller than one sector is refused.
//!
//! Images are locked while open (`flock`, which Linux ties to the open file description):
//! an image the guest writes exclusively, a read-only or snapshot image and every backing file
//! shared. A second VM that would write an image someone else has open, or read one someone
//! is writing, is refused with [`DiskError::Locked`] instead of silently corrupting it; the
//! same file twice in one VM is refused beforehand ([`check_distinct`]). Locks are advisory:
//! they bind programs that take `flock` locks (hvprof, `flock(1)`), not QEMU, whose image
//! locks are fcntl byte-range locks that Linux keeps apart from `flock`.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::qcow2_header::{HeaderError, QCOW2_MAGIC};

/// Bytes per sector.
pub const SECTOR_SIZE: u64 = 512;
/// Length of the GET_ID string.
pub const ID_LEN: usize = 20;

/// The format of a disk image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFormat {
    /// The sectors, one after another.
    Raw,
    /// QEMU's copy-on-write format (versions 2 and 3), possibly over a backing chain.
    Qcow2,
}

impl DiskFormat {
    /// The name `format=` takes.
    pub fn name(self) -> &'static str {
        match self {
            DiskFormat::Raw => "raw",
            DiskFormat::Qcow2 => "qcow2",
        }
    }
}

/// A disk image attached as a virtio-blk device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskConfig {
    /// The image.
    pub path: PathBuf,
    /// Refuse the guest's writes (and open the file read-only).
    pub readonly: bool,
    /// The format the user gave (`format=`); `None`: detected from the image's first bytes.
    pub format: Option<DiskFormat>,
    /// Open the image (and its backing chain) read-only and send the guest's writes to a
    /// temporary overlay that is discarded when the run ends.
    pub snapshot: bool,
}

impl DiskConfig {
    /// A raw or detected image at `path`, read-write unless `readonly`.
    pub fn new(path: impl Into<PathBuf>, readonly: bool) -> Self {
        DiskConfig {
            path: path.into(),
            readonly,
            ..Default::default()
        }
    }

    /// The guest may change the image file itself (neither read-only nor a snapshot).
    pub fn writes_image(&self) -> bool {
        !(self.readonly || self.snapshot)
    }
}

/// Errors opening a disk image.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The image cannot be opened (missing, unreadable, or not writable without
    /// `readonly`).
    #[error("cannot open disk image {}", .0.display())]
    Open(PathBuf, #[source] std::io::Error),
    /// A directory or another file that is not a regular file or block device.
    #[error("disk image {} is not a regular file or block device", .0.display())]
    NotAFile(PathBuf),
    /// Smaller than one sector.
    #[error("disk image {} is {} bytes: smaller than one 512-byte sector", .0.display(), .1)]
    TooSmall(PathBuf, u64),
    /// Another process holds a conflicting lock.
    #[error(
        "disk image {} is in use: {}",
        .0.display(),
        if *.1 {
            "another VM or program has it open for writing"
        } else {
            "another VM or program has it open (add ,readonly everywhere to share it)"
        }
    )]
    Locked(PathBuf, bool),
    /// The same file twice in one VM, at least once read-write.
    #[error(
        "disk image {} is also given as {}: a disk the guest can write may be attached once",
        .0.display(),
        .1.display()
    )]
    Twice(PathBuf, PathBuf),
    /// `format=` says one format, the image's first bytes another.
    #[error(
        "disk image {} is {}, not {} as format={} says",
        .0.display(),
        .2.name(),
        .1.name(),
        .1.name()
    )]
    Format(PathBuf, DiskFormat, DiskFormat),
    /// The qcow2 library refused the image (truncated, corrupt header or tables, a feature
    /// it does not support, a backing file it could not open as an image).
    #[error("disk image {} cannot be used as qcow2", .0.display())]
    Qcow2(PathBuf, #[source] std::io::Error),
    /// A backing file (named in the header of the image or of a file in its chain) cannot
    /// be opened.
    #[error("disk image {}: cannot open its backing file {}", .0.display(), .1.display())]
    Backing(PathBuf, PathBuf, #[source] std::io::Error),
    /// A backing file is being written by someone else.
    #[error(
        "disk image {}: its backing file {} is in use: another VM or program has it open for \
         writing",
        .0.display(),
        .1.display()
    )]
    BackingLocked(PathBuf, PathBuf),
    /// The backing chain comes back to a file already in it.
    #[error(
        "disk image {}: its backing chain loops (backing file {} is already in the chain)",
        .0.display(),
        .1.display()
    )]
    BackingLoop(PathBuf, PathBuf),
    /// More backing files than hvprof follows.
    #[error("disk image {}: its backing chain is longer than {} files", .0.display(), .1)]
    ChainTooLong(PathBuf, usize),
    /// An encrypted qcow2 image (the image or a backing file, the second path).
    #[error(
        "disk image {}: {} is an encrypted qcow2 image, which hvprof cannot read",
        .0.display(),
        .1.display()
    )]
    Encrypted(PathBuf, PathBuf),
    /// A qcow2 header that hvprof's own check refuses ([`super::qcow2_header`]), in the
    /// image (the two paths equal) or a backing file of its chain (the second path).
    #[error("{}", header_message(.0, .1, .2))]
    Header(PathBuf, PathBuf, HeaderError),
    /// A qcow2 image whose data lives in an external data file.
    #[error("disk image {}: qcow2 external data files are not supported", .0.display())]
    ExternalData(PathBuf),
    /// The temporary overlay of `,snapshot` could not be made.
    #[error("disk image {}: cannot create the snapshot overlay in {}", .0.display(), .1.display())]
    Overlay(PathBuf, PathBuf, #[source] std::io::Error),
}

/// "disk image IMAGE: FIELD ..." for the image itself, "disk image IMAGE: backing file
/// FILE: FIELD ..." for a file of its chain.
fn header_message(image: &Path, file: &Path, e: &HeaderError) -> String {
    if image == file {
        format!("disk image {}: {e}", image.display())
    } else {
        format!(
            "disk image {}: backing file {}: {e}",
            image.display(),
            file.display()
        )
    }
}

/// Where the sectors live.
pub trait DiskBackend: Send {
    /// Fills `buf` from byte `offset`.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
    /// Writes `buf` at byte `offset`.
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> std::io::Result<()>;
    /// Makes the writes so far durable.
    fn flush(&mut self) -> std::io::Result<()>;
    /// The guest no longer needs `len` bytes at `offset`: the backend may free them (reads
    /// of them then return anything). By default nothing is freed.
    fn discard(&mut self, _offset: u64, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
    /// Makes `len` bytes at `offset` read as zeroes, freeing them if `unmap` and the backend
    /// can. By default by writing zeroes.
    fn write_zeroes(&mut self, offset: u64, len: u64, _unmap: bool) -> std::io::Result<()> {
        write_zero_bytes(self, offset, len)
    }
    /// The run is over: write back whatever the backend holds in memory. By default nothing.
    fn close(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `len` zero bytes at `offset` through `write_at`, 64 KiB at a time.
pub(super) fn write_zero_bytes<B: DiskBackend + ?Sized>(
    backend: &mut B,
    offset: u64,
    len: u64,
) -> std::io::Result<()> {
    const CHUNK: usize = 64 * 1024;
    let zeroes = vec![0u8; CHUNK];
    let mut done = 0u64;
    while done < len {
        let n = usize::try_from(len - done).map_or(CHUNK, |left| left.min(CHUNK));
        backend.write_at(offset + done, &zeroes[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// `fallocate(2)` on `file` with `mode | FALLOC_FL_KEEP_SIZE`; `Ok(false)` if the file
/// system or device does not support that mode.
fn fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> std::io::Result<bool> {
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(std::io::ErrorKind::InvalidInput.into());
    };
    // SAFETY: fallocate only reads its integer arguments; `file` owns the descriptor for
    // the duration of the call.
    let rc = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(file),
            mode | libc::FALLOC_FL_KEEP_SIZE,
            off,
            n,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(false),
        _ => Err(e),
    }
}

/// A raw image file.
impl DiskBackend for File {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.read_exact_at(buf, offset)
    }
    /// Refuses to put the qcow2 magic at the start of the image: a raw image the guest made
    /// look like qcow2 would be detected as qcow2 the next time, and its header could name any
    /// host file as a backing file for the guest to read (QEMU guards probed raw images the
    /// same way).
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        if offset == 0 && buf.starts_with(&QCOW2_MAGIC) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "a raw image may not start with the qcow2 magic",
            ));
        }
        self.write_all_at(buf, offset)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
    /// Punches a hole (the file keeps its size); a no-op where holes are not supported.
    fn discard(&mut self, offset: u64, len: u64) -> std::io::Result<()> {
        fallocate(self, libc::FALLOC_FL_PUNCH_HOLE, offset, len).map(|_| ())
    }
    /// Punches a hole if `unmap`, else zeroes the range in place (`FALLOC_FL_ZERO_RANGE`);
    /// where neither is supported, writes zeroes.
    fn write_zeroes(&mut self, offset: u64, len: u64, unmap: bool) -> std::io::Result<()> {
        if unmap && fallocate(self, libc::FALLOC_FL_PUNCH_HOLE, offset, len)? {
            return Ok(());
        }
        if fallocate(self, libc::FALLOC_FL_ZERO_RANGE, offset, len)? {
            return Ok(());
        }
        write_zero_bytes(self, offset, len)
    }
}

/// A disk in memory (tests and fuzzing). Accesses outside it are errors.
#[derive(Clone, Debug, Default)]
pub struct MemDisk(pub Vec<u8>);

impl MemDisk {
    fn range(&self, offset: u64, len: usize) -> std::io::Result<std::ops::Range<usize>> {
        let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let end = start
            .checked_add(len)
            .filter(|e| *e <= self.0.len())
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        Ok(start..end)
    }
}

impl DiskBackend for MemDisk {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.0[r]);
        Ok(())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        let r = self.range(offset, buf.len())?;
        self.0[r].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An opened image.
pub struct DiskImage {
    /// The sectors.
    pub backend: Box<dyn DiskBackend>,
    /// Capacity in 512-byte sectors.
    pub sectors: u64,
    /// Writes are refused.
    pub readonly: bool,
    /// The GET_ID string (NUL-padded).
    pub id: [u8; ID_LEN],
}

impl DiskImage {
    /// An image over any backend of `len` bytes.
    pub fn new(backend: Box<dyn DiskBackend>, len: u64, readonly: bool, id: &str) -> Self {
        let mut id_bytes = [0u8; ID_LEN];
        let n = id.len().min(ID_LEN);
        id_bytes[..n].copy_from_slice(&id.as_bytes()[..n]);
        DiskImage {
            backend,
            sectors: len / SECTOR_SIZE,
            readonly,
            id: id_bytes,
        }
    }
}

/// Refuses the same file (device and inode, whatever the path) twice among `disks` unless
/// no occurrence lets the guest change it (each is `,readonly` or `,snapshot`). (Two opens in one process also conflict through their
/// locks, but not on file systems that emulate `flock` with per-process POSIX locks, such as
/// NFS.) Paths that cannot be examined are left for [`DiskImage::open`] to report.
pub fn check_distinct(disks: &[DiskConfig]) -> Result<(), DiskError> {
    let mut seen: Vec<((u64, u64), &DiskConfig)> = Vec::new();
    for d in disks {
        let Ok(meta) = std::fs::metadata(&d.path) else {
            continue;
        };
        let key = (meta.dev(), meta.ino());
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            if d.writes_image() || first.writes_image() {
                return Err(DiskError::Twice(d.path.clone(), first.path.clone()));
            }
        }
        seen.push((key, d));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio::block::qcow2::tests::TestDir;
    use std::path::Path;

    /// `contents` in a file `name` of a fresh directory, removed when the guard is dropped.
    fn temp(name: &str, contents: &[u8]) -> (TestDir, PathBuf) {
        let dir = crate::virtio::block::qcow2::tests::dir(&format!("disk-{name}"));
        let p = dir.join(name);
        std::fs::write(&p, contents).unwrap();
        (dir, p)
    }

    fn cfg(path: &Path, readonly: bool) -> DiskConfig {
        DiskConfig::new(path, readonly)
    }

    #[test]
    fn a_raw_image_cannot_be_made_to_look_like_qcow2() {
        let (_p, p) = temp("magic.img", &[0u8; 1024]);
        let mut d = DiskImage::open(&cfg(&p, false)).unwrap();
        let mut sector = [0u8; 512];
        sector[..4].copy_from_slice(&QCOW2_MAGIC);
        let e = d.backend.write_at(0, &sector).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        // Elsewhere, or anything else at the start, is written.
        d.backend.write_at(512, &sector).unwrap();
        sector[0] = b'X';
        d.backend.write_at(0, &sector).unwrap();
        drop(d);
        let after = std::fs::read(&p).unwrap();
        assert_eq!(&after[..4], b"XFI\xfb");
        assert_eq!(&after[512..516], &QCOW2_MAGIC);
    }

    #[test]
    fn a_file_zeroes_and_discards_in_place_keeping_its_size() {
        const LEN: usize = 64 * 1024;
        let (_p, p) = temp("holes.img", &[0xab; LEN]);
        let mut d = DiskImage::open(&cfg(&p, false)).unwrap();
        let read = |d: &mut DiskImage| {
            let mut b = vec![0u8; LEN];
            d.backend.read_at(0, &mut b).unwrap();
            b
        };
        let zeroed = |b: &[u8], at: usize, n: usize| {
            b[at..at + n].iter().all(|x| *x == 0)
                && b[..at].iter().chain(&b[at + n..]).all(|x| *x == 0xab)
        };
        d.backend.write_zeroes(4096, 8192, false).unwrap();
        assert!(zeroed(&read(&mut d), 4096, 8192), "zero range");
        std::fs::write(&p, [0xab; LEN]).unwrap();
        d.backend.write_zeroes(512, 1024, true).unwrap();
        assert!(
            zeroed(&read(&mut d), 512, 1024),
            "unmap, unaligned to the page"
        );
        std::fs::write(&p, [0xab; LEN]).unwrap();
        d.backend.discard(16384, 16384).unwrap();
        let b = read(&mut d);
        assert!(
            zeroed(&b, 16384, 16384) || b.iter().all(|x| *x == 0xab),
            "a discard frees the range (reads as zeroes in a hole) or leaves it"
        );
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            LEN as u64,
            "size kept"
        );
    }

    #[test]
    fn odd_sized_image_rounds_capacity_down() {
        let (_p, p) = temp("odd.img", &[0u8; 512 * 3 + 100]);
        let d = DiskImage::open(&cfg(&p, false)).unwrap();
        assert_eq!(d.sectors, 3);
        assert!(!d.readonly);
        assert!(d.id.starts_with(b"hvprof"));
    }

    #[test]
    fn missing_tiny_and_directory_images_are_clear_errors() {
        let missing = Path::new("/nonexistent/hvprof/disk.img");
        let e = DiskImage::open(&cfg(missing, true)).err().unwrap();
        assert!(matches!(e, DiskError::Open(..)));
        assert!(e.to_string().contains("/nonexistent/hvprof/disk.img"));
        let (_p, p) = temp("tiny.img", &[0u8; 100]);
        assert!(matches!(
            DiskImage::open(&cfg(&p, true)),
            Err(DiskError::TooSmall(_, 100))
        ));
        let dir = std::env::temp_dir();
        assert!(matches!(
            DiskImage::open(&cfg(&dir, true)),
            Err(DiskError::NotAFile(_))
        ));
    }

    #[test]
    fn read_only_file_opens_read_only() {
        let (_p, p) = temp("ro.img", &[7u8; 1024]);
        let mut perms = std::fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o444);
        std::fs::set_permissions(&p, perms).unwrap();
        let mut d = DiskImage::open(&cfg(&p, true)).unwrap();
        let mut b = [0u8; 4];
        d.backend.read_at(1020, &mut b).unwrap();
        assert_eq!(b, [7; 4]);
        drop(d);
        // Root can open it for writing anyway; everyone else gets a clear error.
        if let Err(e) = DiskImage::open(&cfg(&p, false)) {
            assert!(matches!(e, DiskError::Open(..)));
        }
    }

    #[test]
    fn a_read_write_image_is_locked_against_other_writers_and_readers_until_closed() {
        let (_p, p) = temp("locked.img", &[0u8; 1024]);
        let writer = DiskImage::open(&cfg(&p, false)).unwrap();
        // Another open file description conflicts, as another process's would.
        for readonly in [false, true] {
            let e = DiskImage::open(&cfg(&p, readonly)).err().unwrap();
            assert!(
                matches!(e, DiskError::Locked(_, ro) if ro == readonly),
                "{e}"
            );
            assert!(e.to_string().contains("locked.img") && e.to_string().contains("in use"));
        }
        drop(writer);
        assert!(
            DiskImage::open(&cfg(&p, false)).is_ok(),
            "lock released on close"
        );
    }

    #[test]
    fn read_only_images_are_shared_but_not_with_a_writer() {
        let (_p, p) = temp("shared.img", &[0u8; 1024]);
        let a = DiskImage::open(&cfg(&p, true)).unwrap();
        let b = DiskImage::open(&cfg(&p, true)).unwrap();
        let e = DiskImage::open(&cfg(&p, false)).err().unwrap();
        assert!(matches!(e, DiskError::Locked(_, false)), "{e}");
        assert!(e.to_string().contains(",readonly"), "{e}");
        drop((a, b));
        assert!(DiskImage::open(&cfg(&p, false)).is_ok());
    }

    #[test]
    fn the_same_file_twice_is_refused_unless_every_use_is_read_only() {
        let (_p, p) = temp("twice.img", &[0u8; 1024]);
        // Another path to the same inode.
        let link = p.with_file_name("twice-link.img");
        let _ = std::fs::remove_file(&link);
        std::fs::hard_link(&p, &link).unwrap();
        let (_other, other) = temp("other.img", &[0u8; 1024]);
        let ok = [cfg(&p, false), cfg(&other, false)];
        assert!(check_distinct(&ok).is_ok());
        assert!(check_distinct(&[cfg(&p, true), cfg(&link, true)]).is_ok());
        for (a, b) in [(false, false), (false, true), (true, false)] {
            let e = check_distinct(&[cfg(&p, a), cfg(&link, b)]).err().unwrap();
            assert!(
                matches!(&e, DiskError::Twice(x, y) if *x == link && *y == p),
                "{e}"
            );
        }
        // Missing paths are for open() to report.
        let missing = Path::new("/nonexistent/x.img");
        assert!(check_distinct(&[cfg(missing, false), cfg(missing, false)]).is_ok());
    }

    #[test]
    fn mem_disk_refuses_out_of_range() {
        let mut m = MemDisk(vec![0; 1024]);
        assert!(m.write_at(1020, &[1; 4]).is_ok());
        assert!(m.write_at(1021, &[1; 4]).is_err());
        assert!(m.read_at(u64::MAX, &mut [0; 1]).is_err());
        assert_eq!(m.0.len(), 1024);
    }
}
