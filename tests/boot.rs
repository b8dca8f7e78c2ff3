//! Full-guest boot tests: hvprof boots the fixture kernels of tests/fixtures/
//! (PVH ELF32 and ELF64, Multiboot ELF and a.out kludge) and they report what
//! they found through COM1 and isa-debug-exit.

use crate::harness::{fixture, hvprof_run, status, Fixture, Output, TempDir, FIXTURE_OK};

const CMDLINE: &str = "hello from the hvprof tests x=1";
const INITRD: &[u8] = b"HVPROF-INITRD\nthe rest of the initrd\n";

/// Checks what every run of a pvh fixture must print.
fn assert_pvh_report(out: &Output, name: &str) {
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains(&format!("{name}: start_info ok\n"))
        .assert_stdout_contains(&format!("{name}: rsdp ok\n"))
        .assert_stdout_contains(&format!("{name}: exit 0x00000021\n"));
    let entries = out.stdout_hex(&format!("{name}: memmap entries: "));
    assert!(entries > 0, "no memory map entries\n{out}");
    let shown = out
        .stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{name}: memmap: ")))
        .count();
    assert_eq!(
        shown as u64, entries,
        "memmap lines do not match the count\n{out}"
    );
    assert!(
        out.stdout_hex(&format!("{name}: version ")) >= 1,
        "start_info version 0\n{out}"
    );
}

#[test]
fn pvh32_boots_and_exits_through_debug_exit() {
    let out = hvprof_run(&fixture(Fixture::Pvh32), &["--cmdline", CMDLINE]).run();
    assert_pvh_report(&out, "pvh32");
    out.assert_stdout_contains(&format!("pvh32: cmdline: {CMDLINE}\n"))
        .assert_stdout_contains("pvh32: modules: 0x00000000\n");
}

#[test]
fn pvh32_memmap_has_ram_at_1mib() {
    let out = hvprof_run(&fixture(Fixture::Pvh32), &["--memory", "64"]).run();
    assert_pvh_report(&out, "pvh32");
    // The kernel was loaded at 1 MiB: some type-1 (RAM) entry must cover it.
    let covers = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("pvh32: memmap: "))
        .any(|e| {
            let nums: Vec<u64> = e
                .split([' ', '_'])
                .filter_map(|w| w.strip_prefix("0x"))
                .filter_map(|h| u64::from_str_radix(h, 16).ok())
                .collect();
            let [ahi, alo, shi, slo, ty] = nums[..] else {
                return false;
            };
            let (addr, size) = ((ahi << 32) | alo, (shi << 32) | slo);
            ty == 1 && addr <= 0x10_0000 && addr + size >= 0x10_0000 + 0x10_0000
        });
    assert!(covers, "no RAM entry covers 1 MiB..2 MiB\n{out}");
}

#[test]
fn pvh32_gets_initrd_as_module() {
    let dir = TempDir::new("boot");
    let initrd = dir.write("initrd.img", INITRD);
    let out = hvprof_run(
        &fixture(Fixture::Pvh32),
        &["--initrd".as_ref(), initrd.as_os_str()],
    )
    .run();
    assert_pvh_report(&out, "pvh32");
    out.assert_stdout_contains("pvh32: modules: 0x00000001\n")
        .assert_stdout_contains("pvh32: module0: HVPROF-INITRD.th\n");
}

#[test]
fn pvh64_elf64_with_32bit_entry_boots() {
    let out = hvprof_run(&fixture(Fixture::Pvh64), &["--cmdline", CMDLINE]).run();
    assert_pvh_report(&out, "pvh64");
    out.assert_stdout_contains(&format!("pvh64: cmdline: {CMDLINE}\n"));
}

#[test]
fn pvh32_boots_with_two_cpus() {
    let out = hvprof_run(
        &fixture(Fixture::Pvh32),
        &["--cpus", "2", "--cmdline", CMDLINE],
    )
    .run();
    assert_pvh_report(&out, "pvh32");
    out.assert_stdout_contains(&format!("pvh32: cmdline: {CMDLINE}\n"));
}

#[test]
fn serial_to_file_writes_guest_output_there_not_to_stdout() {
    let dir = TempDir::new("boot");
    let log = dir.join("serial.log");
    let out = hvprof_run(
        &fixture(Fixture::Pvh32),
        &[
            "--serial".as_ref(),
            log.as_os_str(),
            "--cmdline".as_ref(),
            CMDLINE.as_ref(),
        ],
    )
    .run();
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_lacks("pvh32:");
    let serial = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("reading {}: {e}\n{out}", log.display()));
    for line in [
        "pvh32: start_info ok\n",
        &format!("pvh32: cmdline: {CMDLINE}\n"),
        "pvh32: exit 0x00000021\n",
    ] {
        assert!(
            serial.contains(line),
            "serial file lacks {line:?}:\n{serial}\n{out}"
        );
    }
}

#[test]
fn serial_stdout_is_the_explicit_default() {
    let out = hvprof_run(&fixture(Fixture::Pvh32), &["--serial", "stdout"]).run();
    assert_pvh_report(&out, "pvh32");
}

/// Runs a multiboot fixture with an initrd and a command line and checks its report.
fn check_multiboot(kind: Fixture) {
    let dir = TempDir::new("boot");
    let initrd = dir.write("initrd.img", INITRD);
    let memory_mib: u64 = 64;
    let out = hvprof_run(
        &fixture(kind),
        &[
            "--memory".as_ref(),
            "64".as_ref(),
            "--initrd".as_ref(),
            initrd.as_os_str(),
            "--cmdline".as_ref(),
            CMDLINE.as_ref(),
        ],
    )
    .run();
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("multiboot: magic ok\n")
        .assert_stdout_contains("multiboot: mods_count 0x00000001\n")
        .assert_stdout_contains("multiboot: module0: HVPROF-INITRD.th\n")
        .assert_stdout_contains("multiboot: exit 0x00000021\n");
    // QEMU (like GRUB) puts the kernel's file name before the arguments; accept either.
    let cmdline = out.stdout_field("multiboot: cmdline: ").unwrap_or_default();
    assert!(
        cmdline.ends_with(CMDLINE),
        "cmdline {cmdline:?} does not end with {CMDLINE:?}\n{out}"
    );
    assert_eq!(
        out.stdout_hex("multiboot: module0 size "),
        INITRD.len() as u64,
        "module size is not the initrd's size\n{out}"
    );
    // mem_upper is the KiB of RAM from 1 MiB up to the first hole: close to
    // (64 - 1) MiB, less whatever the VMM reserves at the top (QEMU: 128 KiB).
    let mem_upper = out.stdout_hex("multiboot: mem_upper ");
    let ceiling = (memory_mib - 1) * 1024;
    assert!(
        mem_upper <= ceiling && mem_upper + 4096 >= ceiling,
        "mem_upper {mem_upper} KiB is not within 4 MiB below {ceiling} KiB\n{out}"
    );
    // The memory map must be present (flags bit 6) with RAM at 1 MiB.
    let flags = out.stdout_hex("multiboot: flags ");
    assert!(
        flags & (1 << 6) != 0,
        "no memory map in the multiboot info\n{out}"
    );
    assert!(
        out.stdout
            .contains("multiboot: mmap: 0x00000000_0x00100000 "),
        "no mmap entry at 1 MiB\n{out}"
    );
}

#[test]
fn multiboot_elf_gets_cmdline_initrd_and_memory() {
    check_multiboot(Fixture::Multiboot);
}

/// QEMU loads a multiboot segment anywhere in RAM; so does hvprof (kvm-unit-tests' realmode
/// test links at 0x8000).
#[test]
fn multiboot_kernel_linked_at_0x8000_boots() {
    check_multiboot(Fixture::MultibootLow);
}

/// A segment over a structure hvprof writes for the boot is refused, naming both.
#[test]
fn pvh_segment_over_the_start_info_is_refused_by_name() {
    let out = hvprof_run(&fixture(Fixture::Pvh32OverStartInfo), &["--memory", "64"]).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["segment at 0x6000", "overlaps the PVH start info"]);
}

#[test]
fn multiboot_aout_kludge_flat_binary_boots() {
    check_multiboot(Fixture::MultibootAout);
}

#[test]
fn multiboot_without_initrd_has_no_modules() {
    let out = hvprof_run(&fixture(Fixture::Multiboot), &[] as &[&str]).run();
    out.assert_debug_exit(FIXTURE_OK)
        .assert_stdout_contains("multiboot: magic ok\n");
    let flags = out.stdout_hex("multiboot: flags ");
    if flags & (1 << 3) != 0 {
        out.assert_stdout_contains("multiboot: mods_count 0x00000000\n");
    }
}

/// isa-debug-exit must end the run with (v << 1) | 1 whatever the access width.
fn check_debug_exit(value: u8, width: u8) {
    let out = hvprof_run(
        &fixture(Fixture::DebugExit { value, width }),
        &[] as &[&str],
    )
    .run();
    out.assert_debug_exit(value)
        .assert_stdout_contains("debug_exit: writing");
}

#[test]
fn debug_exit_byte_write() {
    check_debug_exit(0x10, 1);
}

#[test]
fn debug_exit_word_write() {
    check_debug_exit(0x11, 2);
}

#[test]
fn debug_exit_dword_write() {
    check_debug_exit(0x12, 4);
}

#[test]
fn debug_exit_zero_gives_status_1_not_clean() {
    check_debug_exit(0, 1);
}
