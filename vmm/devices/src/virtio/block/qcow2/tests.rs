//! qcow2 images made with imago itself (the guest-booting tests in tests/qcow2.rs use
//! qemu-img's): reads and writes through the backend, backing chains, and the chains the
//! gate refuses.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use imago::qcow2::Qcow2;
use imago::{FormatCreateBuilder, StorageOpenOptions};

use super::*;
use crate::virtio::block::disk::{DiskConfig, DiskImage};

const MIB: u64 = 1 << 20;
const MIB_USIZE: usize = 1 << 20;

/// A fresh directory for one test, removed with everything in it when dropped.
pub(crate) struct TestDir(PathBuf);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn dir(name: &str) -> TestDir {
    let d = std::env::temp_dir().join(format!("hvprof-qcow2-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TestDir(d)
}

/// Makes an empty qcow2 image of `size` bytes at `path`, its header naming `backing` (file
/// name, format) if given.
pub(crate) fn create(path: &Path, size: u64, backing: Option<(&str, &str)>) {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    let storage =
        ImagoFile::from_open_file(file, StorageOpenOptions::new().write(true).filename(path))
            .unwrap();
    let mut b = Qcow2::<ImagoFile>::create_builder(storage).size(size);
    if let Some((name, format)) = backing {
        b = b.backing(name.into(), format.into());
    }
    b.create().unwrap();
}

fn open(path: &Path) -> Result<DiskImage, DiskError> {
    DiskImage::open(&DiskConfig::new(path, false))
}

fn read(d: &mut DiskImage, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    d.backend.read_at(offset, &mut b).unwrap();
    b
}

#[test]
fn writes_read_back_and_persist_across_a_reopen() {
    let d = dir("persist");
    let img = d.join("disk.qcow2");
    create(&img, 4 * MIB, None);
    let mut disk = open(&img).unwrap();
    assert_eq!(disk.sectors, 4 * MIB / 512);
    assert_eq!(
        read(&mut disk, 0, 512),
        vec![0; 512],
        "a new image reads zeroes"
    );
    disk.backend.write_at(512, &[0x5a; 1024]).unwrap();
    disk.backend.write_at(3 * MIB, &[0xa5; 4096]).unwrap();
    disk.backend.flush().unwrap();
    disk.backend.close().unwrap();
    drop(disk);
    let mut disk = open(&img).unwrap();
    assert_eq!(read(&mut disk, 512, 1024), vec![0x5a; 1024]);
    assert_eq!(read(&mut disk, 3 * MIB, 4096), vec![0xa5; 4096]);
    assert_eq!(read(&mut disk, 0, 512), vec![0; 512]);
}

#[test]
fn discard_and_write_zeroes_read_back_as_zeroes() {
    let d = dir("zeroes");
    let img = d.join("disk.qcow2");
    create(&img, 2 * MIB, None);
    let mut disk = open(&img).unwrap();
    disk.backend.write_at(0, &vec![0x11; MIB_USIZE]).unwrap();
    // A whole 64 KiB cluster and a part of one, with and without unmap.
    disk.backend.write_zeroes(64 << 10, 64 << 10, true).unwrap();
    disk.backend.write_zeroes(200 << 10, 4096, false).unwrap();
    disk.backend.write_zeroes(300 << 10, 512, true).unwrap();
    let b = read(&mut disk, 0, MIB_USIZE);
    let zero = |r: std::ops::Range<usize>| b[r].iter().all(|x| *x == 0);
    assert!(zero((64 << 10)..(128 << 10)));
    assert!(zero((200 << 10)..(204 << 10)));
    assert!(zero((300 << 10)..((300 << 10) + 512)));
    assert!(b[..64 << 10].iter().all(|x| *x == 0x11));
    assert!(b[(304 << 10)..].iter().all(|x| *x == 0x11));
    // A discarded cluster of an image without a backing file reads as zeroes or as before.
    disk.backend.discard(512 << 10, 64 << 10).unwrap();
    let c = read(&mut disk, 512 << 10, 64 << 10);
    assert!(c.iter().all(|x| *x == 0) || c.iter().all(|x| *x == 0x11));
}

#[test]
fn a_backing_file_shows_through_and_is_never_written() {
    let d = dir("backing");
    let base = d.join("base.raw");
    let data: Vec<u8> = (0..MIB_USIZE).map(|i| (i / 512).to_le_bytes()[0]).collect();
    std::fs::write(&base, &data).unwrap();
    let mid = d.join("mid.qcow2");
    create(&mid, MIB, Some(("base.raw", "raw")));
    // The top names its backing file by absolute path, the middle by a relative one.
    let top = d.join("top.qcow2");
    create(&top, MIB, Some((mid.to_str().unwrap(), "qcow2")));
    let mut disk = open(&top).unwrap();
    assert_eq!(read(&mut disk, 5 * 512, 512), vec![5; 512]);
    disk.backend.write_at(5 * 512, &[0xee; 512]).unwrap();
    // The second 64 KiB cluster (sectors 128-255) zeroed over the backing file's data.
    disk.backend.write_zeroes(64 << 10, 64 << 10, true).unwrap();
    assert_eq!(read(&mut disk, 5 * 512, 512), vec![0xee; 512]);
    assert_eq!(read(&mut disk, 4 * 512, 512), vec![4; 512]);
    assert_eq!(read(&mut disk, 200 * 512, 512), vec![0; 512]);
    assert_eq!(
        read(&mut disk, 300 * 512, 512),
        vec![300u16.to_le_bytes()[0]; 512]
    );
    disk.backend.close().unwrap();
    drop(disk);
    assert_eq!(std::fs::read(&base).unwrap(), data, "the base changed");
}

#[test]
fn a_backing_loop_a_missing_backing_file_and_a_busy_one_are_refused_by_name() {
    let d = dir("bad-chains");
    let a = d.join("a.qcow2");
    let b = d.join("b.qcow2");
    create(&a, MIB, Some(("b.qcow2", "qcow2")));
    create(&b, MIB, Some(("a.qcow2", "qcow2")));
    let e = open(&a).err().unwrap();
    assert!(
        matches!(&e, DiskError::BackingLoop(i, again) if *i == a && again.ends_with("a.qcow2")),
        "{e}"
    );
    let lonely = d.join("lonely.qcow2");
    create(&lonely, MIB, Some(("gone.raw", "raw")));
    let e = open(&lonely).err().unwrap();
    assert!(
        matches!(&e, DiskError::Backing(i, p, _) if *i == lonely && p.ends_with("gone.raw")),
        "{e}"
    );
    // Someone writes the backing file: the chain cannot be opened.
    let base = d.join("busy.raw");
    std::fs::write(&base, vec![0u8; MIB_USIZE]).unwrap();
    let top = d.join("busy-top.qcow2");
    create(&top, MIB, Some(("busy.raw", "raw")));
    let writer = OpenOptions::new().write(true).open(&base).unwrap();
    writer.try_lock().unwrap();
    let e = open(&top).err().unwrap();
    assert!(matches!(&e, DiskError::BackingLocked(..)), "{e}");
    drop(writer);
    assert!(open(&top).is_ok());
}

#[test]
fn a_chain_longer_than_the_limit_is_refused() {
    let d = dir("long");
    std::fs::write(d.join("l0.raw"), vec![0u8; 4096]).unwrap();
    create(&d.join("l1.qcow2"), 4096, Some(("l0.raw", "raw")));
    for i in 2..=MAX_CHAIN {
        let back = format!("l{}.qcow2", i - 1);
        create(&d.join(format!("l{i}.qcow2")), 4096, Some((&back, "qcow2")));
    }
    let e = open(&d.join(format!("l{MAX_CHAIN}.qcow2"))).err().unwrap();
    assert!(matches!(e, DiskError::ChainTooLong(_, MAX_CHAIN)), "{e}");
    // One file fewer is within it.
    assert!(open(&d.join(format!("l{}.qcow2", MAX_CHAIN - 1))).is_ok());
}

#[test]
fn zeroes_in_a_disk_smaller_than_a_cluster_are_written() {
    let d = dir("small");
    let img = d.join("small.qcow2");
    // 8 sectors in one 64 KiB cluster.
    create(&img, 4096, None);
    let mut disk = open(&img).unwrap();
    disk.backend.write_at(0, &[0x42; 4096]).unwrap();
    for unmap in [false, true] {
        disk.backend.write_zeroes(1024, 512, unmap).unwrap();
        let b = read(&mut disk, 0, 4096);
        assert!(b[1024..1536].iter().all(|x| *x == 0), "unmap {unmap}");
        assert!(b[..1024].iter().chain(&b[1536..]).all(|x| *x == 0x42));
        disk.backend.write_at(1024, &[0x42; 512]).unwrap();
    }
}
