//! A disk image as a place a Linux guest's files are found (report::symbols::guest_files::
//! image, `--disk-image` and a run's own disks): the MBR and GPT partition tables that say
//! where an ext2/3/4 file system starts, and ext4-view's reading of that file system, paths
//! through symbolic links included. Every byte is the image's, and a guest that could write
//! its disk wrote them. Nothing may panic, loop, reserve memory beyond the image's size or
//! read a file above the bound.
//!
//! The first byte chooses how the rest makes an image: even, the bytes are the image (the
//! partition tables and the superblock checks); odd, they are patches, each a little-endian
//! u32 offset, a length byte and that many bytes, written over a real 128 KiB file system
//! (mke2fs's, the report crate's test image), so that mutations reach its inodes, extents and
//! directories instead of being cut at libFuzzer's first length limits.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use report::symbols::guest_files::image::{fs_start, Ext4Read};
use report::symbols::guest_files::{ImagePlace, Opener};

/// The largest file a lookup may return.
const LIMIT: u64 = 1 << 20;

const BASE: &[u8] = include_bytes!("../../vmm/report/testdata/ext4-links.img");

/// `BASE` with `patches` written over it.
fn patched(mut patches: &[u8]) -> Vec<u8> {
    let mut image = BASE.to_vec();
    while let [a, b, c, d, len, rest @ ..] = patches {
        let at = u32::from_le_bytes([*a, *b, *c, *d]) as usize % image.len();
        let len = usize::from(*len).min(rest.len()).min(image.len() - at);
        image[at..at + len].copy_from_slice(&rest[..len]);
        patches = &rest[len..];
    }
    image
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = Arc::new(if mode & 1 == 0 {
        rest.to_vec()
    } else {
        patched(rest)
    });
    let _ = fs_start(&mut bytes.to_vec());
    let image = Arc::clone(&bytes);
    let open: Opener = Arc::new(move || Ok(Box::new(image.to_vec()) as Box<dyn Ext4Read>));
    let place = ImagePlace::new("fuzzed.img".into(), open);
    if place.check().is_err() {
        return;
    }
    for path in [
        "/bin/prog",
        "/lib/libc.so.6",
        "/usr/../bin/prog",
        "/loop",
        "/lost+found",
    ] {
        if let Some(file) = place.read(path, LIMIT) {
            assert!(u64::try_from(file.len()).unwrap() <= LIMIT);
        }
    }
});
