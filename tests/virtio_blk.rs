//! virtio-blk end to end: a fixture kernel (tests/fixtures/virtio_blk.S) finds the device
//! through PCI configuration space, places its BAR, sets up a queue and reads and writes
//! sectors, then takes completions as MSI-X interrupts; the test checks what it printed and
//! what the image file holds afterwards.

use crate::harness::{fixture, hvprof_run, status, Fixture, Output, TempDir, FIXTURE_OK};

pub(crate) const SECTORS: usize = 8;

/// An image whose sector n is filled with byte n, and sector 0 starts with a marker.
pub(crate) fn image() -> Vec<u8> {
    let mut img: Vec<u8> = (0..SECTORS * 512)
        .map(|i| u8::try_from(i / 512).unwrap())
        .collect();
    img[..16].copy_from_slice(b"HVPROF-SECTOR-0!");
    img
}

fn run(disk_arg: &str) -> Output {
    run_fixture(disk_arg, false)
}

/// Runs the fixture on `disk_arg`; `ring`: it negotiates indirect descriptors and event
/// indexes.
fn run_fixture(disk_arg: &str, ring: bool) -> Output {
    hvprof_run(
        &fixture(Fixture::VirtioBlk {
            readonly: disk_arg.ends_with(",readonly"),
            ring,
        }),
        // -v: the device's summary at the end of the run.
        &["--disk", disk_arg, "-v"],
    )
    .run()
}

pub(crate) fn expected_sector1() -> Vec<u8> {
    let mut s: Vec<u8> = (0..512).map(|i| u8::try_from(i & 0xff).unwrap()).collect();
    s[..16].copy_from_slice(b"written by guest");
    s
}

#[test]
fn guest_write_reaches_the_image_file() {
    let dir = TempDir::new("virtio-blk");
    let img = dir.write("disk.img", &image());
    let out = run(img.to_str().unwrap());
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("virtio-blk: slot 0x00000002\n")
        // INTA# (pin 1) routed to GSI 10 for slot 2.
        .assert_stdout_contains("virtio-blk: irq 0x0000010a\n")
        .assert_stdout_contains("virtio-blk: bar0 size 0x00008000\n")
        .assert_stdout_contains("virtio-blk: queue max 0x00000100\n")
        .assert_stdout_contains("virtio-blk: capacity 0x00000008\n")
        .assert_stdout_contains("virtio-blk: sector0: HVPROF-SECTOR-0!\n")
        .assert_stdout_contains("virtio-blk: write status 0x00000000\n")
        .assert_stdout_contains("virtio-blk: flush status 0x00000000\n")
        .assert_stdout_contains("virtio-blk: id: hvprof")
        .assert_stdout_contains("virtio-blk: beyond-end status 0x00000001\n")
        .assert_stdout_contains("virtio-blk: sector1: written by guest\n")
        .assert_stdout_contains("virtio-blk: write-zeroes status 0x00000000\n")
        .assert_stdout_contains("virtio-blk: isr 0x00000001\n")
        .assert_stdout_contains("virtio-blk: requests 0x00000009\n")
        // Every notification reached the device through its ioeventfd (KVM_IOEVENTFD),
        // served by the event loop while the vCPU polled the used ring; the first completion
        // raised INTx (the fixture reads the ISR only after the seventh), then two went as
        // MSI-X messages, one of them held while masked.
        .assert_stderr_contains(
            "virtio-blk 00:02.0: 8 requests OK, 1 IOERR, 0 UNSUPP; notifications: 9 by \
             ioeventfd, 0 by exit, 0 ignored; interrupts: 1 INTx, 2 MSI-X (1 held while \
             masked, 0 blocked, 0 refused)",
        );
    let features = out.stdout_field("virtio-blk: features ").unwrap_or("");
    assert!(
        features.starts_with("0x00000001_"),
        "VERSION_1 not offered\n{out}"
    );
    let after = std::fs::read(&img).unwrap();
    assert_eq!(after.len(), SECTORS * 512, "image size changed");
    assert_eq!(&after[512..1024], &expected_sector1()[..], "sector 1");
    let before = image();
    assert_eq!(&after[..512], &before[..512], "sector 0 changed");
    assert_eq!(&after[1024..1536], &[0; 512][..], "sector 2 not zeroed");
    assert_eq!(&after[1536..], &before[1536..], "sectors 3.. changed");
}

#[test]
fn completions_arrive_as_msix_interrupts_held_while_masked() {
    let dir = TempDir::new("virtio-blk");
    let img = dir.write("disk.img", &image());
    let out = run(img.to_str().unwrap());
    out.assert_debug_exit(FIXTURE_OK)
        // Two table entries: configuration changes and queue 0.
        .assert_stdout_contains("virtio-blk: msix vectors 0x00000002\n")
        // Entry 0 taken; entry 9 does not exist, so the register reads NO_VECTOR.
        .assert_stdout_contains("virtio-blk: vectors: queue 0x00000000 config 0x0000ffff\n")
        // Masked: the completion left the pending bit set and no interrupt came (the
        // fixture exits 0x36 if one does); unmasking delivered it and cleared the bit.
        .assert_stdout_contains("virtio-blk: pba masked 0x00000001\n")
        .assert_stdout_contains("virtio-blk: pba unmasked 0x00000000\n")
        // Once after the unmask and once for the unmasked read, through vector 0x41's gate.
        .assert_stdout_contains(
            "virtio-blk: vector 0x41 taken 0x00000001\nvirtio-blk: pba unmasked 0x00000000\n\
             virtio-blk: vector 0x41 taken 0x00000002\n",
        )
        // With MSI-X the ISR's queue bit stays clear.
        .assert_stdout_contains("virtio-blk: isr msi-x 0x00000000\n");
}

#[test]
fn indirect_tables_and_event_indexes_work_when_negotiated() {
    let dir = TempDir::new("virtio-blk");
    let img = dir.write("disk.img", &image());
    let out = run_fixture(img.to_str().unwrap(), true);
    // The fixture exits 0x3a if the features are not offered and 0x39 if the completion
    // before used_event interrupts; every request's chain is in an indirect table.
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("virtio-blk: sector0: HVPROF-SECTOR-0!\n")
        .assert_stdout_contains("virtio-blk: beyond-end status 0x00000001\n")
        .assert_stdout_contains("virtio-blk: sector1: written by guest\n")
        .assert_stdout_contains("virtio-blk: pba masked 0x00000001\n")
        // 8.: the completion before used_event stayed silent, the one after interrupted.
        .assert_stdout_contains("virtio-blk: vector 0x41 taken 0x00000003\n")
        // The device asks to be notified at the next buffer after the last it used.
        .assert_stdout_contains("virtio-blk: avail_event 0x0000000b\n")
        .assert_stdout_contains("virtio-blk: requests 0x0000000b\n")
        .assert_stderr_contains(
            "virtio-blk 00:02.0: 10 requests OK, 1 IOERR, 0 UNSUPP; notifications: 11 by \
             ioeventfd, 0 by exit, 0 ignored; interrupts: 1 INTx, 3 MSI-X (1 held while \
             masked, 0 blocked, 0 refused)",
        );
    let after = std::fs::read(&img).unwrap();
    assert_eq!(&after[512..1024], &expected_sector1()[..], "sector 1");
}

#[test]
fn read_only_disk_refuses_the_write() {
    let dir = TempDir::new("virtio-blk");
    let img = dir.write("disk.img", &image());
    let out = run(&format!("{},readonly", img.display()));
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("virtio-blk: write status 0x00000001\n")
        .assert_stdout_contains("virtio-blk: sector1: ");
    let low = out
        .stdout_field("virtio-blk: features ")
        .and_then(|f| f.split_once('_'))
        .and_then(|(_, low)| u32::from_str_radix(low.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    assert_ne!(low & (1 << 5), 0, "VIRTIO_BLK_F_RO not offered\n{out}");
    assert_eq!(
        std::fs::read(&img).unwrap(),
        image(),
        "read-only image changed"
    );
}

#[test]
fn odd_sized_image_rounds_capacity_down() {
    let dir = TempDir::new("virtio-blk");
    let mut img = image();
    img.extend_from_slice(&[0xee; 100]);
    let path = dir.write("odd.img", &img);
    let out = run(path.to_str().unwrap());
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("virtio-blk: capacity 0x00000008\n");
    let after = std::fs::read(&path).unwrap();
    assert_eq!(&after[SECTORS * 512..], &[0xee; 100], "tail changed");
}

#[test]
fn missing_image_is_a_usage_error() {
    let dir = TempDir::new("virtio-blk");
    let missing = dir.join("nope.img");
    let out = run(missing.to_str().unwrap());
    out.assert_status(status::USAGE);
    out.assert_error_line(&["nope.img"]);
}

#[test]
fn tiny_image_and_bad_option_are_usage_errors() {
    let dir = TempDir::new("virtio-blk");
    let tiny = dir.write("tiny.img", &[0; 100]);
    let out = run(tiny.to_str().unwrap());
    out.assert_status(status::USAGE);
    out.assert_error_line(&["smaller than one 512-byte sector"]);
    let out = run(&format!("{},bogus", tiny.display()));
    out.assert_status(status::USAGE);
    out.assert_error_line(&["--disk"]);
}

#[test]
fn an_image_in_use_elsewhere_is_refused_and_left_unchanged() {
    let dir = TempDir::new("virtio-blk");
    let img = dir.write("disk.img", &image());
    let arg = img.to_str().unwrap();
    // Another program writing the image: a VM may neither write nor read it.
    let other = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&img)
        .unwrap();
    other.try_lock().unwrap();
    for disk in [arg.to_owned(), format!("{arg},readonly")] {
        let out = run(&disk);
        out.assert_status(status::USAGE);
        out.assert_error_line(&["disk.img", "in use"]);
    }
    drop(other);
    // The same image twice in one VM, once read-write: refused before either is opened.
    let twice = format!("{arg},readonly");
    let out = hvprof_run(
        &fixture(Fixture::VirtioBlk {
            readonly: false,
            ring: false,
        }),
        &["--disk", arg, "--disk", &twice],
    )
    .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["disk.img", "also given as"]);
    assert_eq!(std::fs::read(&img).unwrap(), image(), "image changed");
    // Read-only, two VMs share it: one holds a shared lock while the guest runs.
    let reader = std::fs::File::open(&img).unwrap();
    reader.try_lock_shared().unwrap();
    run(&format!("{arg},readonly")).assert_debug_exit(FIXTURE_OK);
}
