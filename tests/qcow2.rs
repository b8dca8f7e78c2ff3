//! qcow2 disks end to end: images, backing chains and overlays made by qemu-img (and qemu-io
//! for data placed in one layer), driven by the virtio-blk fixture kernel of tests/virtio_blk.rs
//! (it reads sector 0, writes sector 1, zeroes sector 2 with WRITE_ZEROES, reads sector 1
//! back); qemu-img then checks what the guest left: `check` finds the image clean and
//! `compare` finds it equal to the raw image the guest's writes should make.

use std::path::{Path, PathBuf};

use crate::harness::{
    fixture, hvprof_run, qcow2_overlay, status, tool, Fixture, Output, TempDir, FIXTURE_OK,
};
use crate::virtio_blk::{expected_sector1, image};

fn qemu_img(args: &[&str]) {
    tool("qemu-img", "qemu-utils", args);
}

/// Writes `sector` with `byte` into the top layer of `img` (its backing files untouched).
fn qemu_io_fill(img: &Path, sector: usize, byte: u8) {
    let cmd = format!("write -q -P {byte:#x} {} 512", sector * 512);
    tool(
        "qemu-io",
        "qemu-utils",
        &["-f", "qcow2", "-c", &cmd, img.to_str().unwrap()],
    );
}

fn run(disk_arg: &str) -> Output {
    hvprof_run(
        &fixture(Fixture::VirtioBlk {
            readonly: false,
            ring: false,
        }),
        &["--disk", disk_arg, "-v"],
    )
    .run()
}

fn arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// What the fixture's writes make of `before`: sector 1 written, sector 2 zeroed.
fn after_guest(before: &[u8]) -> Vec<u8> {
    let mut v = before.to_vec();
    v[512..1024].copy_from_slice(&expected_sector1());
    v[1024..1536].fill(0);
    v
}

/// `qemu-img check` finds `img` clean and `qemu-img compare` finds it equal to `expected`.
fn assert_qemu_agrees(dir: &TempDir, img: &Path, expected: &[u8]) {
    qemu_img(&["check", "-f", "qcow2", arg(img)]);
    let raw = dir.write("expected.raw", expected);
    qemu_img(&["compare", "-f", "qcow2", "-F", "raw", arg(img), arg(&raw)]);
}

/// `image()` as a qcow2 image made by qemu-img.
fn converted(dir: &TempDir) -> PathBuf {
    let raw = dir.write("source.raw", &image());
    let q = dir.join("disk.qcow2");
    qemu_img(&["convert", "-f", "raw", "-O", "qcow2", arg(&raw), arg(&q)]);
    q
}

#[test]
fn guest_reads_a_qcow2_image_and_its_writes_land_in_it() {
    let dir = TempDir::new("qcow2");
    let q = converted(&dir);
    let out = run(arg(&q));
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("virtio-blk: capacity 0x00000008\n")
        .assert_stdout_contains("virtio-blk: sector0: HVPROF-SECTOR-0!\n")
        .assert_stdout_contains("virtio-blk: write status 0x00000000\n")
        .assert_stdout_contains("virtio-blk: flush status 0x00000000\n")
        .assert_stdout_contains("virtio-blk: write-zeroes status 0x00000000\n")
        .assert_stdout_contains("virtio-blk: sector1: written by guest\n")
        // The event loop served every request under its system-call filter.
        .assert_stderr_contains("8 requests OK, 1 IOERR, 0 UNSUPP");
    assert_qemu_agrees(&dir, &q, &after_guest(&image()));
}

#[test]
fn guest_reads_through_a_backing_chain_that_is_never_written() {
    let dir = TempDir::new("qcow2-chain");
    let base = dir.write("base.raw", &image());
    // mid names its backing file relatively, top by absolute path; 512-byte clusters so
    // that one sector written into the top leaves its neighbours to the layers below.
    let mid = dir.join("mid.qcow2");
    qcow2_overlay(&mid, "base.raw", "raw", None);
    let top = dir.join("top.qcow2");
    qcow2_overlay(&top, arg(&mid), "qcow2", Some(512));
    qemu_io_fill(&top, 7, 0x4f);
    let mid_before = std::fs::read(&mid).unwrap();

    // Sector 0 comes from the base through both layers.
    let out = run(arg(&top));
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("virtio-blk: sector0: HVPROF-SECTOR-0!\n")
        .assert_stdout_contains("virtio-blk: sector1: written by guest\n");
    let mut expected = after_guest(&image());
    expected[7 * 512..].fill(0x4f);
    assert_qemu_agrees(&dir, &top, &expected);

    // Sector 0 placed in the top layer hides the base's.
    qemu_io_fill(&top, 0, 0x4f);
    let out = run(arg(&top));
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("virtio-blk: sector0: OOOOOOOOOOOOOOOO\n");
    expected[..512].fill(0x4f);
    assert_qemu_agrees(&dir, &top, &expected);

    assert_eq!(std::fs::read(&base).unwrap(), image(), "base changed");
    assert_eq!(std::fs::read(&mid).unwrap(), mid_before, "mid changed");
}

#[test]
fn with_snapshot_the_image_is_unchanged_after_the_guest_wrote() {
    let dir = TempDir::new("qcow2-snapshot");
    let q = converted(&dir);
    let raw = dir.write("disk.raw", &image());
    for img in [&q, &raw] {
        let before = checksum(img);
        let out = run(&format!("{},snapshot", arg(img)));
        // The guest's writes succeeded and read back within the run.
        out.assert_debug_exit(FIXTURE_OK)
            .assert_stdout_contains("virtio-blk: sector0: HVPROF-SECTOR-0!\n")
            .assert_stdout_contains("virtio-blk: write status 0x00000000\n")
            .assert_stdout_contains("virtio-blk: sector1: written by guest\n")
            .assert_stderr_contains("8 requests OK, 1 IOERR, 0 UNSUPP");
        assert_eq!(checksum(img), before, "{} changed", img.display());
    }
    qemu_img(&["check", "-f", "qcow2", arg(&q)]);
}

/// SHA-256 of `p` (sha256sum, from coreutils).
fn checksum(p: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Each bad image: exit status 2 and one error line naming the file and the cause.
#[test]
fn bad_images_are_usage_errors_that_name_the_file() {
    let dir = TempDir::new("qcow2-bad");
    let fresh = |name: &str| {
        let p = dir.join(name);
        qemu_img(&["create", "-q", "-f", "qcow2", arg(&p), "1M"]);
        p
    };
    let poke = |p: &Path, at: u64, bytes: &[u8]| {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.write_all_at(bytes, at).unwrap();
    };

    let truncated = fresh("truncated.qcow2");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(100)
        .unwrap();
    // cluster_bits 40 (a 1 TiB cluster).
    let corrupt = fresh("corrupt.qcow2");
    poke(&corrupt, 20, &40u32.to_be_bytes());
    // Incompatible feature bit 63, which nothing implements.
    let feature = fresh("feature.qcow2");
    poke(&feature, 72, &(1u64 << 63).to_be_bytes());
    // crypt_method 1 (AES), which imago does not decrypt.
    let encrypted = fresh("encrypted.qcow2");
    poke(&encrypted, 32, &1u32.to_be_bytes());
    // a -> b -> a.
    let b = fresh("b.qcow2");
    let a = dir.join("a.qcow2");
    qcow2_overlay(&a, "b.qcow2", "qcow2", None);
    qemu_img(&[
        "rebase",
        "-u",
        "-f",
        "qcow2",
        "-b",
        "a.qcow2",
        "-F",
        "qcow2",
        arg(&b),
    ]);
    // A backing file that has gone.
    let gone = dir.write("gone.raw", &[0u8; 4096]);
    let orphan = dir.join("orphan.qcow2");
    qcow2_overlay(&orphan, "gone.raw", "raw", None);
    std::fs::remove_file(&gone).unwrap();
    let raw = dir.write("plain.raw", &image());
    let good = fresh("good.qcow2");

    let cases: [(String, &[&str]); 8] = [
        (
            arg(&truncated).into(),
            &["truncated.qcow2", "qcow2 header truncated"],
        ),
        (
            arg(&corrupt).into(),
            &["corrupt.qcow2", "qcow2 cluster_bits 40 outside 9..=21"],
        ),
        (
            arg(&feature).into(),
            &["feature.qcow2", "incompatible_features", "bit 63 (unknown)"],
        ),
        (
            arg(&encrypted).into(),
            &["encrypted.qcow2", "an encrypted qcow2 image"],
        ),
        (arg(&a).into(), &["a.qcow2", "backing chain loops"]),
        (
            arg(&orphan).into(),
            &["orphan.qcow2", "gone.raw", "No such file"],
        ),
        (
            format!("{},format=qcow2", arg(&raw)),
            &["plain.raw", "is raw, not qcow2"],
        ),
        (
            format!("{},format=raw", arg(&good)),
            &["good.qcow2", "is qcow2, not raw"],
        ),
    ];
    for (disk, needles) in cases {
        let out = run(&disk);
        out.assert_status(status::USAGE);
        let line = out.assert_error_line(needles);
        assert!(!line.contains("panicked"), "{line}");
    }
    assert_eq!(std::fs::read(&raw).unwrap(), image(), "plain.raw changed");
}
