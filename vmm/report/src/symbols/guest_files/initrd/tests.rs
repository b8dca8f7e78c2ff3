use std::io::Write;

use super::*;

fn entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8], ino: u32, nlink: u32) {
    push_entry(out, name, mode, data, ino, nlink);
}

fn trailer(out: &mut Vec<u8>) {
    entry(out, TRAILER, 0, b"", 0, 1);
    out.resize(out.len().next_multiple_of(512), 0);
}

const FILE: u32 = 0o100_755;
const LINK: u32 = 0o120_777;
const DIR: u32 = 0o040_755;

fn busybox_like() -> Vec<u8> {
    let mut a = Vec::new();
    entry(&mut a, "bin", DIR, b"", 1, 2);
    entry(&mut a, "bin/busybox", FILE, b"\x7fELF busybox", 2, 1);
    entry(&mut a, "bin/awk", LINK, b"busybox", 3, 1);
    entry(&mut a, "./lib", LINK, b"/usr/lib", 4, 1);
    entry(&mut a, "usr/lib/libc.so.6", FILE, b"libc", 5, 1);
    entry(
        &mut a,
        "usr/lib/libc-link.so",
        LINK,
        b"../../lib/libc.so.6",
        6,
        1,
    );
    entry(&mut a, "loop", LINK, b"loop", 7, 1);
    // A hard link: the data comes with the last name.
    entry(&mut a, "bin/first", FILE, b"", 8, 2);
    entry(&mut a, "bin/second", FILE, b"shared", 8, 2);
    trailer(&mut a);
    a
}

#[test]
fn files_are_found_through_links_in_their_path_and_at_their_end() {
    let i = Initrd::parse(&busybox_like()).unwrap();
    assert_eq!(i.read("/bin/busybox"), Some(&b"\x7fELF busybox"[..]));
    assert_eq!(i.read("/bin/awk"), Some(&b"\x7fELF busybox"[..]));
    assert_eq!(i.read("//bin/./busybox"), Some(&b"\x7fELF busybox"[..]));
    assert_eq!(i.read("/lib/libc.so.6"), Some(&b"libc"[..]));
    assert_eq!(i.read("/usr/lib/libc-link.so"), Some(&b"libc"[..]));
    assert_eq!(i.read("/bin/../bin/busybox"), Some(&b"\x7fELF busybox"[..]));
    assert_eq!(i.read("/bin/first"), Some(&b"shared"[..]));
    assert_eq!(i.read("/bin/second"), Some(&b"shared"[..]));
    assert_eq!(i.read("/bin"), None, "a directory is no file");
    assert_eq!(i.read("/nothing"), None);
    assert_eq!(i.read("/loop"), None, "a link to itself ends");
}

#[test]
fn archives_follow_one_another_plain_then_compressed_as_the_kernel_reads_them() {
    // Early microcode style: a plain archive, then a compressed one, each padded.
    let mut first = Vec::new();
    entry(
        &mut first,
        "kernel/x86/microcode/GenuineIntel.bin",
        FILE,
        b"ucode",
        1,
        1,
    );
    entry(&mut first, "odd", FILE, b"12345", 2, 1);
    trailer(&mut first);
    let mut second = Vec::new();
    entry(&mut second, "odd", FILE, b"replaced", 3, 1);
    entry(&mut second, "bin/prog", FILE, b"prog", 4, 1);
    trailer(&mut second);
    for format in ["gzip", "xz", "zstd"] {
        let packed = match format {
            "gzip" => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(&second).unwrap();
                e.finish().unwrap()
            }
            "xz" => {
                let mut w =
                    lzma_rust2::XzWriter::new(Vec::new(), lzma_rust2::XzOptions::with_preset(1))
                        .unwrap();
                w.write_all(&second).unwrap();
                w.finish().unwrap()
            }
            _ => {
                let mut z = Vec::new();
                ruzstd::encoding::compress(
                    &second[..],
                    &mut z,
                    ruzstd::encoding::CompressionLevel::Fastest,
                );
                z
            }
        };
        let mut file = first.clone();
        file.extend_from_slice(&packed);
        let i = Initrd::parse(&file).unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(i.read("/bin/prog"), Some(&b"prog"[..]), "{format}");
        assert_eq!(
            i.read("/odd"),
            Some(&b"replaced"[..]),
            "{format}: later wins"
        );
        assert_eq!(
            i.read("/kernel/x86/microcode/GenuineIntel.bin"),
            Some(&b"ucode"[..])
        );
    }
}

#[test]
fn damaged_archives_are_errors_that_say_where() {
    let good = busybox_like();
    let e = Initrd::parse(b"hello").unwrap_err();
    assert!(matches!(e, InitrdError::NotAnArchive { at: 0 }), "{e}");
    // An entry whose data runs past the end.
    let mut cut = Vec::new();
    entry(&mut cut, "big", FILE, &[1; 64], 1, 1);
    cut.truncate(cut.len() - 8);
    let e = Initrd::parse(&cut).unwrap_err();
    assert!(matches!(e, InitrdError::Damaged { at: 0, .. }), "{e}");
    // A header with a bad hex digit.
    let mut bad = good.clone();
    bad[10] = b'z';
    let e = Initrd::parse(&bad).unwrap_err();
    assert!(matches!(e, InitrdError::Damaged { at: 0, .. }), "{e}");
    // A truncated gzip archive after a good one.
    let mut half = good.clone();
    half.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0]);
    let e = Initrd::parse(&half).unwrap_err();
    assert!(matches!(e, InitrdError::Unpack { .. }), "{e}");
    // Every prefix of a good archive is an error or a smaller index, never a panic.
    for n in 0..good.len() {
        if let Ok(i) = Initrd::parse(&good[..n]) {
            assert!(i.len() <= 9);
        }
    }
}
