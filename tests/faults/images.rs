//! Corrupt disk and kernel images: qcow2 images made by qemu-img and then patched the way
//! issue 30 found hvprof accepting them (a 2^64-1 byte disk, cluster_bits 9 over a 64 KiB
//! cluster layout, an image cut to 512 bytes, an L1 table past the end), each refused with
//! status 2 and a message naming the image and the header field, before the guest starts.
//! For each, `qemu-img check` refuses the image too, so hvprof is not stricter than QEMU.
//! Metadata without refcounts (which made imago overwrite the header) is refused too.
//! A FIFO as a backing file is refused without blocking in open(2); truncated bzImages
//! (prefixes of Debian's kernel) are refused as malformed with one error line.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::harness::{fixture, hvprof_run, status, tool, Fixture, Output, TempDir, ERROR_PREFIX};

/// Generous: every refusal here comes before the guest starts, in well under a second.
const LIMIT: Duration = Duration::from_secs(60);

fn arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// A 64 MiB qcow2 image as qemu-img makes it: version 3, 64 KiB clusters, the refcount
/// table at 0x10000, a one-entry L1 table at 0x30000 (the file's last 8 bytes).
fn image(dir: &TempDir, name: &str) -> PathBuf {
    let p = dir.join(name);
    tool(
        "qemu-img",
        "qemu-utils",
        &["create", "-q", "-f", "qcow2", arg(&p), "64M"],
    );
    p
}

/// Writes `bytes` at `offset` of the file `p`.
fn patch(p: &Path, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

/// Asserts that `qemu-img check` refuses `p` (it cannot open it, or finds errors).
fn assert_qemu_refuses(p: &Path) {
    let out = Command::new("qemu-img")
        .args(["check", "-f", "qcow2", arg(p)])
        .output()
        .expect("cannot run qemu-img: install Debian's qemu-utils");
    assert!(
        !out.status.success(),
        "qemu-img check accepts {}:\n{}{}",
        p.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// hvprof with `disk` as the fixture's disk.
fn run_disk(disk: &Path) -> Output {
    let kernel = fixture(Fixture::VirtioBlk {
        readonly: false,
        ring: false,
    });
    hvprof_run(&kernel, &["--disk", arg(disk)])
        .limit(LIMIT)
        .run()
}

/// Asserts status 2 and one error line naming `needles` (the image and the field), and
/// that the guest did not start.
fn assert_refused(out: &Output, needles: &[&str]) {
    out.assert_status(status::USAGE);
    out.assert_error_line(needles);
    out.assert_stdout_lacks("virtio-blk:");
}

#[test]
fn qcow2_virtual_size_2_pow_64_minus_1_is_refused() {
    let dir = TempDir::new("img-size");
    let p = image(&dir, "huge.qcow2");
    patch(&p, 24, &u64::MAX.to_be_bytes());
    assert_qemu_refuses(&p);
    assert_refused(
        &run_disk(&p),
        &[arg(&p), "qcow2 size 18446744073709551615 bytes exceeds"],
    );
}

/// qemu-img accepts cluster_bits 9 in itself; this image's one-entry L1 table then maps
/// 32 KiB of its 64 MiB, which QEMU refuses ("L1 table is too small"), and so does hvprof.
#[test]
fn qcow2_cluster_bits_9_over_a_64k_layout_is_refused() {
    let dir = TempDir::new("img-cb9");
    let p = image(&dir, "cb9.qcow2");
    patch(&p, 20, &9u32.to_be_bytes());
    assert_qemu_refuses(&p);
    assert_refused(
        &run_disk(&p),
        &[arg(&p), "l1_size 1 too small", "cluster_bits 9"],
    );
}

#[test]
fn qcow2_cluster_bits_outside_9_to_21_is_refused() {
    let dir = TempDir::new("img-cb8");
    for bits in [8u32, 22] {
        let p = image(&dir, &format!("cb{bits}.qcow2"));
        patch(&p, 20, &bits.to_be_bytes());
        assert_qemu_refuses(&p);
        let field = format!("qcow2 cluster_bits {bits} outside 9..=21");
        assert_refused(&run_disk(&p), &[arg(&p), &field]);
    }
}

#[test]
fn qcow2_image_truncated_to_512_bytes_is_refused() {
    let dir = TempDir::new("img-trunc");
    let p = image(&dir, "cut.qcow2");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(512)
        .unwrap();
    assert_qemu_refuses(&p);
    assert_refused(
        &run_disk(&p),
        &[
            arg(&p),
            "l1_table_offset 0x30000",
            "past the end of the file",
        ],
    );
}

#[test]
fn qcow2_l1_table_past_the_end_is_refused() {
    let dir = TempDir::new("img-l1");
    let p = image(&dir, "l1.qcow2");
    patch(&p, 40, &0x10_0000u64.to_be_bytes());
    assert_qemu_refuses(&p);
    assert_refused(
        &run_disk(&p),
        &[
            arg(&p),
            "l1_table_offset 0x100000",
            "past the end of the file",
        ],
    );
}

/// The check covers every file of a chain: a good overlay over a base whose L1 table was
/// moved past its end is refused naming both.
#[test]
fn qcow2_backing_file_with_a_corrupt_header_is_refused() {
    let dir = TempDir::new("img-chain");
    let base = image(&dir, "base.qcow2");
    let top = dir.join("top.qcow2");
    crate::harness::qcow2_overlay(&top, "base.qcow2", "qcow2", None);
    patch(&base, 40, &0x10_0000u64.to_be_bytes());
    // qemu-img check reads only the top file's tables: the base is checked by itself.
    assert_qemu_refuses(&base);
    assert_refused(
        &run_disk(&top),
        &[
            arg(&top),
            "backing file",
            "base.qcow2",
            "l1_table_offset 0x100000",
        ],
    );
}

/// With no refcount block for the header cluster (a zeroed refcount table entry), imago's
/// first allocation wrote a refcount block over the header and then overflowed the
/// event-loop thread's stack: hvprof aborted mid-run (status 134) and the image was no
/// longer qcow2. With a refcount of 0 for the L1 table's cluster, imago would hand it out
/// for data. Both are refused and the image is left as it was.
#[test]
fn qcow2_metadata_without_refcounts_is_refused_and_left_unchanged() {
    let dir = TempDir::new("img-refcount");
    let cases: [(&str, u64, &[u8], &str); 2] = [
        (
            "reftable0.qcow2",
            0x10000,
            &[0; 8],
            "refcount table entry 0 is 0",
        ),
        (
            "l1-refcount0.qcow2",
            0x20006,
            &[0; 2],
            "refcount of the L1 table",
        ),
    ];
    for (name, at, bytes, field) in cases {
        let p = image(&dir, name);
        patch(&p, at, bytes);
        assert_qemu_refuses(&p);
        let before = std::fs::read(&p).unwrap();
        assert_refused(&run_disk(&p), &[arg(&p), field]);
        assert_eq!(std::fs::read(&p).unwrap(), before, "{name} changed");
    }
}

/// A FIFO as backing file blocked hvprof in open(2) until a writer came (the harness killed
/// it at its limit); it is refused at once by name.
#[test]
fn qcow2_fifo_backing_file_is_refused_without_blocking() {
    let dir = TempDir::new("img-fifo");
    let fifo = dir.join("pipe");
    tool("mkfifo", "coreutils", &[arg(&fifo)]);
    let top = dir.join("top.qcow2");
    // -u: qemu-img does not open the backing file (it would block too).
    tool(
        "qemu-img",
        "qemu-utils",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-u",
            "-b",
            "pipe",
            "-F",
            "raw",
            arg(&top),
            "1M",
        ],
    );
    assert_refused(
        &run_disk(&top),
        &[arg(&top), "pipe", "not a regular file or block device"],
    );
}

/// hvprof on the first `len` bytes of Debian's bzImage: status 2, one error line naming the
/// file, "malformed bzImage" and `field`.
fn assert_prefix_refused(len: usize, field: &str) {
    let dir = TempDir::new("img-bz");
    let whole = std::fs::read(crate::linux::find_bzimage()).expect("reading the bzImage");
    let cut = dir.write("prefix", &whole[..len]);
    let out = hvprof_run(&cut, &["--timeout", "30"]).limit(LIMIT).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[arg(&cut), "malformed bzImage", field]);
    let errors = out
        .stderr
        .lines()
        .filter(|l| l.starts_with(ERROR_PREFIX))
        .count();
    assert_eq!(errors, 1, "one error line\n{out}");
    assert!(!out.stderr.contains("Underflow"), "{out}");
}

/// The first 64 KiB booted (the decompressor ran off the end and triple-faulted: status 4).
#[test]
fn bzimage_cut_to_64k_is_refused_as_malformed() {
    assert_prefix_refused(64 << 10, "syssize");
}

/// The first 1 KiB failed with linux-loader's "Underflow ..." printed twice.
#[test]
fn bzimage_cut_to_1k_is_refused_as_malformed() {
    assert_prefix_refused(1 << 10, "setup_sects");
}
