//! Opening images: format detection, `format=`, snapshots, and qcow2 images that are not
//! usable.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use super::*;
use crate::virtio::block::qcow2::tests::{create, dir};

const MIB: u64 = 1 << 20;

fn cfg(path: &Path) -> DiskConfig {
    DiskConfig::new(path, false)
}

#[test]
fn the_format_is_detected_and_a_given_format_must_match() {
    let d = dir("detect");
    let raw = d.join("disk.raw");
    std::fs::write(&raw, vec![0x33u8; 4096]).unwrap();
    let q = d.join("disk.qcow2");
    create(&q, MIB, None);
    assert_eq!(DiskImage::open(&cfg(&raw)).unwrap().sectors, 8);
    assert_eq!(DiskImage::open(&cfg(&q)).unwrap().sectors, MIB / 512);
    for (path, given, found) in [
        (&raw, DiskFormat::Qcow2, DiskFormat::Raw),
        (&q, DiskFormat::Raw, DiskFormat::Qcow2),
    ] {
        let mut c = cfg(path);
        c.format = Some(given);
        let e = DiskImage::open(&c).err().unwrap();
        assert!(
            matches!(&e, DiskError::Format(p, g, f) if p == path && *g == given && *f == found),
            "{e}"
        );
        assert!(e.to_string().contains(&format!("format={}", given.name())));
        c.format = Some(found);
        assert!(DiskImage::open(&c).is_ok());
    }
    // Three bytes cannot be the magic: a raw image, then too small.
    let short = d.join("short.raw");
    std::fs::write(&short, b"QFI").unwrap();
    assert!(matches!(
        DiskImage::open(&cfg(&short)),
        Err(DiskError::TooSmall(_, 3))
    ));
}

#[test]
fn snapshot_writes_stay_in_the_overlay_and_the_image_is_unchanged() {
    let d = dir("snapshot");
    let raw = d.join("disk.raw");
    let data: Vec<u8> = (0..MIB).map(|i| (i % 251) as u8).collect();
    std::fs::write(&raw, &data).unwrap();
    let q = d.join("disk.qcow2");
    create(&q, MIB, None);
    {
        let mut w = DiskImage::open(&cfg(&q)).unwrap();
        w.backend.write_at(4096, &[0x77; 4096]).unwrap();
        w.backend.close().unwrap();
    }
    let q_before = std::fs::read(&q).unwrap();
    for path in [&raw, &q] {
        let mut c = cfg(path);
        c.snapshot = true;
        let mut disk = DiskImage::open(&c).unwrap();
        assert_eq!(disk.sectors, MIB / 512);
        assert!(!disk.readonly, "the guest may write a snapshot");
        let mut b = vec![0u8; 4096];
        disk.backend.read_at(4096, &mut b).unwrap();
        let expect = if path == &raw {
            data[4096..8192].to_vec()
        } else {
            vec![0x77; 4096]
        };
        assert_eq!(b, expect, "reads come from the image");
        disk.backend.write_at(0, &[0xcc; 8192]).unwrap();
        disk.backend.write_zeroes(64 << 10, 64 << 10, true).unwrap();
        disk.backend.flush().unwrap();
        disk.backend.read_at(4096, &mut b).unwrap();
        assert_eq!(b, vec![0xcc; 4096], "writes read back");
        // Another snapshot or reader may share the image meanwhile; a writer may not.
        assert!(DiskImage::open(&c).is_ok());
        assert!(matches!(
            DiskImage::open(&cfg(path)),
            Err(DiskError::Locked(..))
        ));
        disk.backend.close().unwrap();
    }
    assert_eq!(std::fs::read(&raw).unwrap(), data, "raw image changed");
    assert_eq!(std::fs::read(&q).unwrap(), q_before, "qcow2 image changed");
}

#[test]
fn truncated_corrupt_and_unsupported_qcow2_images_are_refused_by_name() {
    let d = dir("corrupt");
    // (what to do to a good image, its name)
    type Spoil<'a> = &'a dyn Fn(&std::fs::File);
    let cases: [(&str, Spoil); 4] = [
        ("truncated.qcow2", &|f| f.set_len(72).unwrap()),
        ("version.qcow2", &|f| {
            f.write_all_at(&9u32.to_be_bytes(), 4).unwrap()
        }),
        ("cluster-bits.qcow2", &|f| {
            f.write_all_at(&40u32.to_be_bytes(), 20).unwrap()
        }),
        // Incompatible feature bit 63, which no implementation knows.
        ("feature.qcow2", &|f| {
            f.write_all_at(&(1u64 << 63).to_be_bytes(), 72).unwrap()
        }),
    ];
    for (name, spoil) in cases {
        let p = d.join(name);
        create(&p, MIB, None);
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        spoil(&f);
        drop(f);
        let e = DiskImage::open(&cfg(&p)).err().unwrap();
        // hvprof's header check refuses them before imago reads the image.
        assert!(
            matches!(&e, DiskError::Header(x, y, _) if *x == p && *y == p),
            "{name}: {e}"
        );
        assert!(e.to_string().contains(name), "{e}");
    }
}

#[test]
fn encrypted_qcow2_images_are_refused_as_the_image_or_a_backing_file() {
    let d = dir("encrypted");
    let base = d.join("secret.qcow2");
    create(&base, MIB, None);
    // crypt_method 2: LUKS.
    let f = OpenOptions::new().write(true).open(&base).unwrap();
    f.write_all_at(&2u32.to_be_bytes(), 32).unwrap();
    drop(f);
    let e = DiskImage::open(&cfg(&base)).err().unwrap();
    assert!(
        matches!(&e, DiskError::Encrypted(i, x) if *i == base && *x == base),
        "{e}"
    );
    let top = d.join("top.qcow2");
    create(&top, MIB, Some(("secret.qcow2", "qcow2")));
    let e = DiskImage::open(&cfg(&top)).err().unwrap();
    assert!(
        matches!(&e, DiskError::Encrypted(i, x) if *i == top && x.ends_with("secret.qcow2")),
        "{e}"
    );
}
