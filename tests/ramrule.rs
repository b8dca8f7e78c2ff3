//! Guest RAM is what the guest's own memory map says (docs/abi.md section 3): a request block
//! or a START frame in the legacy area 0x9FC00-0xFFFFF, which the VMM's memory slot backs but
//! no PC memory map calls RAM, is refused with the documented status, under a direct (PVH)
//! boot of the reference guest and under a SeaBIOS boot of a boot sector; a normal call works
//! afterwards.

use std::path::Path;
use std::time::Duration;

use crate::firmware::{build_boot_sector, seabios_boots_disk};
use crate::harness::{hvprof_run, TempDir, REFGUEST_PASS};

/// `scenario=ramrule` (images/refguest/src/scenario/ramrule.rs): blocks at 0xA0000, 0xF0000
/// and one running from RAM into 0x9FC00 get STATUS_ACCESS_VIOLATION and stay untouched;
/// START with frame 0xA0 or 0xFF in its page list gets STATUS_INSUFFICIENT_RESOURCES; then
/// START with the buffer's own frames, STOP, CLOSE and QUERY_INFO succeed.
#[test]
fn pvh_blocks_and_frames_outside_the_memory_maps_ram_are_refused() {
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let out = hvprof_run(elf, &["--cmdline", "scenario=ramrule"])
        .limit(Duration::from_secs(40))
        .run();
    let want = [
        ("block_a0000", "0xc0000005"),
        ("block_f0000", "0xc0000005"),
        ("block_into_9fc00", "0xc0000005"),
        ("create", "0x00000000"),
        ("start_frame_a0", "0xc000009a"),
        ("start_frame_ff", "0xc000009a"),
        ("start_own_frames", "0x00000000"),
        ("stop", "0x00000000"),
        ("close", "0x00000000"),
        ("query_info_after", "0x00000000"),
    ];
    for (check, status) in want {
        let prefix = format!("refguest: ramrule {check} ");
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no line for {check}\n{out}"));
        assert!(
            line.contains(&format!("status={status} ")) && line.ends_with(" ok"),
            "{check}: want {status}: {line}\n{out}"
        );
    }
    for block in ["block_a0000", "block_f0000", "block_into_9fc00"] {
        out.assert_stdout_contains(&format!(
            "refguest: ramrule {block}_untouched field=0x5a5a5a5a ok"
        ));
    }
    out.assert_stdout_contains("refguest: ramrule bad=0");
    out.assert_stdout_lacks("BAD");
    out.assert_debug_exit(REFGUEST_PASS);
}

/// tests/fixtures/ramrule_mbr.S booted by SeaBIOS from the virtio disk rings the doorbell from
/// real mode (CPL0, paging off) with the same blocks and page lists as the PVH test; it exits
/// with 0x41 when every status was as documented, 0x50 + n when its check n failed (listed in
/// the fixture's header).
#[test]
fn firmware_blocks_and_frames_outside_the_memory_maps_ram_are_refused() {
    let dir = TempDir::new("ramrule-mbr");
    let mut img = build_boot_sector(&dir, "ramrule_mbr.S");
    img.resize(1 << 20, 0);
    let img = dir.write("disk.img", &img);
    let out = seabios_boots_disk(&img);
    out.assert_stdout_contains("ramrule: ok");
    out.assert_debug_exit(0x41);
}
