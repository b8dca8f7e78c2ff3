use super::*;
use crate::testimage::ImageBuilder;
use crate::Regions;

const BASE: u64 = 0xffff_f800_1000_0000;

fn image_at(bytes: Vec<u8>) -> (Regions, Result<Image, PeError>) {
    let mut mem = Regions::new().with(BASE, bytes);
    let image = Image::read(&mut mem, BASE);
    (mem, image)
}

#[test]
fn reads_a_well_formed_header() {
    let (_, image) = image_at(
        ImageBuilder::new(0x5000)
            .function(0x1000, 0x1010, 0x4000)
            .build(),
    );
    let image = image.unwrap();
    assert_eq!(
        (image.base, image.size, image.timestamp),
        (BASE, 0x5000, 0x5eed_1234)
    );
    assert_eq!(
        image.exceptions,
        Directory {
            rva: 0x200,
            size: 12
        }
    );
    assert_eq!(image.debug, Directory::default());
    assert!(
        image.contains(BASE + 0x4fff)
            && !image.contains(BASE + 0x5000)
            && !image.contains(BASE - 1)
    );
}

#[test]
fn refuses_headers_that_are_not_pe32_plus_or_lie() {
    let good = ImageBuilder::new(0x2000).build();
    let patch = |at: usize, b: &[u8]| {
        let mut v = good.clone();
        v[at..at + b.len()].copy_from_slice(b);
        v
    };
    for bad in [
        patch(0, b"ZM"),
        patch(0x3c, &0x10u32.to_le_bytes()),
        patch(0x3c, &0xf00u32.to_le_bytes()),
        patch(0x80, b"PE\0\x01"),
        patch(0x84, &0x14cu16.to_le_bytes()),
        patch(0x80 + 24, &0x10bu16.to_le_bytes()),
        patch(0x80 + 20, &100u16.to_le_bytes()),
        patch(0x80 + 24 + 56, &0u32.to_le_bytes()),
        patch(0x80 + 24 + 56, &0x8000_0000u32.to_le_bytes()),
    ] {
        assert_eq!(image_at(bad).1, Err(PeError::NotPe(BASE)));
    }
    // A header cut short by unmapped memory is unreadable, not a panic.
    assert!(matches!(
        image_at(good[..0x100].to_vec()).1,
        Err(PeError::Unreadable(_))
    ));
}

/// A WOW64 process's DLLs are x86 images: PE32's optional header puts the directories 16
/// bytes earlier, and directory 3 is no exception table.
#[test]
fn reads_an_x86_header_with_its_directories_where_pe32_puts_them() {
    let (_, image) = image_at(
        ImageBuilder::new(0x3000)
            .pe32()
            .directory(0, 0x1000, 0x40)
            .directory(3, 0x1800, 0x10)
            .directory(6, 0x2000, 28)
            .build(),
    );
    let image = image.unwrap();
    assert_eq!(
        (image.machine, image.size, image.timestamp),
        (Machine::I386, 0x3000, 0x5eed_1234)
    );
    assert_eq!(
        (image.exports, image.debug),
        (
            Directory {
                rva: 0x1000,
                size: 0x40
            },
            Directory {
                rva: 0x2000,
                size: 28
            }
        )
    );
    assert_eq!(image.exceptions, Directory::default());
    let x64 = image_at(ImageBuilder::new(0x3000).build()).1.unwrap();
    assert_eq!(x64.machine, Machine::Amd64);
}

#[test]
fn refuses_an_x86_header_that_mixes_its_kinds_or_is_cut_short() {
    let good = ImageBuilder::new(0x2000).pe32().build();
    assert!(image_at(good.clone()).1.is_ok());
    let patch = |at: usize, b: &[u8]| {
        let mut v = good.clone();
        v[at..at + b.len()].copy_from_slice(b);
        v
    };
    for bad in [
        // x86-64's machine with PE32's magic, and x86's with PE32+'s.
        patch(0x84, &0x8664u16.to_le_bytes()),
        patch(0x80 + 24, &0x20bu16.to_le_bytes()),
        // An optional header too short to hold PE32's directories.
        patch(0x80 + 20, &95u16.to_le_bytes()),
    ] {
        assert_eq!(image_at(bad).1, Err(PeError::NotPe(BASE)));
    }
}

#[test]
fn a_directory_outside_the_image_is_ignored() {
    let mut bytes = ImageBuilder::new(0x2000)
        .function(0x1000, 0x1010, 0x1800)
        .build();
    let dir = 0x80 + 24 + 112 + 3 * 8;
    bytes[dir + 4..dir + 8].copy_from_slice(&0x2000u32.to_le_bytes());
    assert_eq!(image_at(bytes).1.unwrap().exceptions, Directory::default());
}

#[test]
fn finds_functions_by_binary_search() {
    let mut b = ImageBuilder::new(0x8000);
    for i in 0..100u32 {
        b = b.function(0x1000 + i * 0x40, 0x1000 + i * 0x40 + 0x30, 0x6000 + i * 8);
    }
    let (mut mem, image) = image_at(b.build());
    let image = image.unwrap();
    for i in [0u32, 1, 50, 98, 99] {
        let f = image
            .function(&mut mem, BASE + u64::from(0x1000 + i * 0x40 + 0x2f))
            .unwrap();
        assert_eq!(f.map(|f| f.unwind), Some(0x6000 + i * 8));
    }
    // Gaps between functions, and addresses before, after and outside the image: none.
    for rva in [0x1030u64, 0xfff, 0x1000 + 100 * 0x40, 0x9000] {
        assert_eq!(image.function(&mut mem, BASE + rva).unwrap(), None);
    }
}

#[test]
fn an_indirect_entry_borrows_its_targets_unwind_data() {
    let bytes = ImageBuilder::new(0x4000)
        .function(0x1000, 0x1100, 0x3000)
        .function(0x1200, 0x1280, 0x200 | 1)
        .build();
    let (mut mem, image) = image_at(bytes);
    let f = image
        .unwrap()
        .function(&mut mem, BASE + 0x1240)
        .unwrap()
        .unwrap();
    assert_eq!((f.begin, f.end, f.unwind), (0x1200, 0x1280, 0x3000));
}

/// Found by the pe_image fuzz target: an indirect entry whose own range runs past the image
/// was returned unchecked.
#[test]
fn an_indirect_entry_past_the_image_end_is_refused() {
    let bytes = ImageBuilder::new(0x4000)
        .function(0x1000, 0x1100, 0x3000)
        .function(0x3f00, 0x9000, 0x200 | 1)
        .build();
    let (mut mem, image) = image_at(bytes);
    let image = image.unwrap();
    assert_eq!(image.function(&mut mem, BASE + 0x3f10).unwrap(), None);
}
