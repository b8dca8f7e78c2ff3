//! Full-guest tests of hvprof's failure paths: one test per way a run can end
//! other than the guest writing to isa-debug-exit, each checking the exit
//! status of the CLI contract and the one-line `hvprof: error: ` message.

use std::time::Duration;

use crate::harness::{fixture, hvprof, hvprof_run, status, Fixture, TempDir};

/// Arguments that make a run of `kernel` valid apart from what a test varies.
fn run_args(kernel: &std::path::Path) -> Vec<std::ffi::OsString> {
    vec!["run".into(), "--kernel".into(), kernel.into()]
}

#[test]
fn missing_kernel_file_is_a_usage_error_naming_the_path() {
    let dir = TempDir::new("failures");
    let missing = dir.join("no-such-kernel.elf");
    let out = hvprof(run_args(&missing)).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[missing.to_str().expect("utf-8 temp path"), "No such file"]);
}

#[test]
fn random_bytes_are_not_a_bootable_kernel() {
    // Deterministic pseudo-random bytes (xorshift); checked below not to look
    // like an ELF, a bzImage ("HdrS" at 0x202) or a Multiboot header.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3]
        })
        .collect();
    assert_ne!(&bytes[..4], b"\x7fELF");
    assert_ne!(&bytes[0x202..0x206], b"HdrS");
    assert!(!bytes[..8192]
        .chunks(4)
        .any(|w| w == 0x1bad_b002u32.to_le_bytes()));

    let dir = TempDir::new("failures");
    let kernel = dir.write("random.bin", &bytes);
    let out = hvprof(run_args(&kernel)).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["not a bootable kernel"]);
}

#[test]
fn empty_kernel_file_is_a_usage_error() {
    let dir = TempDir::new("failures");
    let kernel = dir.write("empty.bin", b"");
    let out = hvprof(run_args(&kernel)).run();
    out.assert_status(status::USAGE);
    out.assert_some_error_line();
}

#[test]
fn elf_truncated_inside_its_header_is_a_usage_error() {
    let elf = std::fs::read(fixture(Fixture::Pvh32)).expect("reading the pvh32 fixture");
    let dir = TempDir::new("failures");
    let kernel = dir.write("truncated-header.elf", &elf[..30]); // ELF32 header is 52 bytes
    let out = hvprof(run_args(&kernel)).run();
    out.assert_status(status::USAGE);
    out.assert_some_error_line();
}

#[test]
fn elf_truncated_before_its_program_headers_is_a_usage_error() {
    let elf = std::fs::read(fixture(Fixture::Pvh32)).expect("reading the pvh32 fixture");
    // e_phoff (offset 28 in an ELF32 header) points past what we keep.
    let phoff = u32::from_le_bytes(elf[28..32].try_into().expect("4 bytes")) as usize;
    let dir = TempDir::new("failures");
    let kernel = dir.write("truncated-phdrs.elf", &elf[..phoff + 8]);
    let out = hvprof(run_args(&kernel)).run();
    out.assert_status(status::USAGE);
    out.assert_some_error_line();
}

#[test]
fn elf_truncated_inside_its_segment_is_a_usage_error() {
    let elf = std::fs::read(fixture(Fixture::Pvh32)).expect("reading the pvh32 fixture");
    // The PT_LOAD segment's file contents start at 0x1000 (see pvh.ld and
    // readelf); keep its first bytes only.
    assert!(elf.len() > 0x1100, "pvh32 fixture unexpectedly small");
    let dir = TempDir::new("failures");
    let kernel = dir.write("truncated-segment.elf", &elf[..0x1100]);
    let out = hvprof(run_args(&kernel)).run();
    out.assert_status(status::USAGE);
    out.assert_some_error_line();
}

#[test]
fn triple_fault_is_a_crash() {
    let out = hvprof_run(&fixture(Fixture::TripleFault), &[] as &[&str]).run();
    out.assert_status(status::CRASHED)
        .assert_stdout_contains("triple_fault: loading an empty IDT")
        .assert_stdout_lacks("still alive");
    out.assert_error_line(&["triple fault"]);
}

#[test]
fn cli_hlt_is_a_hang() {
    let out = hvprof_run(&fixture(Fixture::CliHlt), &["--timeout", "30"]).run();
    out.assert_status(status::HUNG)
        .assert_stdout_contains("cli_hlt: halting");
    out.assert_error_line(&["halted with interrupts disabled"]);
}

#[test]
fn cli_hlt_on_two_cpus_is_a_hang() {
    // The second vCPU never gets a startup IPI: it is waiting, not running, and
    // must not keep the run from being called hung.
    let out = hvprof_run(
        &fixture(Fixture::CliHlt),
        &["--cpus", "2", "--timeout", "30"],
    )
    .run();
    out.assert_status(status::HUNG);
    out.assert_error_line(&["halted with interrupts disabled"]);
}

#[test]
fn spin_reaches_timeout() {
    let out = hvprof_run(&fixture(Fixture::Spin), &["--timeout", "3"])
        .limit(Duration::from_secs(30))
        .run();
    out.assert_status(status::TIMED_OUT)
        .assert_stdout_contains("spin: spinning")
        .assert_elapsed_below(Duration::from_secs(15));
    assert!(
        out.elapsed >= Duration::from_secs(3),
        "timed out early, after {:.2?}\n{out}",
        out.elapsed
    );
    out.assert_error_line(&["timed out after"]);
}

#[test]
fn idle_guest_halted_with_interrupts_enabled_is_not_a_hang() {
    let out = hvprof_run(&fixture(Fixture::Idle), &["--timeout", "3"])
        .limit(Duration::from_secs(30))
        .run();
    out.assert_status(status::TIMED_OUT)
        .assert_stdout_contains("idle: halting")
        .assert_elapsed_below(Duration::from_secs(15));
    out.assert_error_line(&["timed out after"]);
}

#[test]
fn i8042_reset_is_a_clean_end() {
    let out = hvprof_run(&fixture(Fixture::Reset), &["--timeout", "30"]).run();
    out.assert_status(status::CLEAN)
        .assert_stdout_contains("reset: pulsing reset")
        .assert_stdout_lacks("still running after the reset");
}

#[test]
fn sigterm_stops_a_running_guest_and_prints_the_summary() {
    let mut run = hvprof_run(&fixture(Fixture::Spin), &["--timeout", "60"])
        .limit(Duration::from_secs(30))
        .spawn();
    run.wait_for_stdout("spin: spinning", Duration::from_secs(20));
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_status(status::SIGNALLED);
    // The summary's format is not part of the contract, but it names vCPUs.
    assert!(
        out.stderr.to_lowercase().contains("vcpu"),
        "no run summary on stderr\n{out}"
    );
}

#[test]
fn sigint_stops_a_running_guest() {
    let mut run = hvprof_run(&fixture(Fixture::Spin), &["--timeout", "60"])
        .limit(Duration::from_secs(30))
        .spawn();
    run.wait_for_stdout("spin: spinning", Duration::from_secs(20));
    run.signal(libc::SIGINT);
    run.wait().assert_status(status::SIGNALLED);
}

/// Runs `hvprof` with `args` after `run --kernel <pvh32>` and expects a usage error.
fn check_bad_args(extra: &[&str]) {
    let out = hvprof_run(&fixture(Fixture::Pvh32), extra).run();
    out.assert_status(status::USAGE)
        .assert_stdout_lacks("pvh32:");
}

#[test]
fn zero_cpus_is_a_usage_error() {
    check_bad_args(&["--cpus", "0"]);
}

#[test]
fn zero_memory_is_a_usage_error() {
    check_bad_args(&["--memory", "0"]);
}

#[test]
fn non_numeric_cpus_is_a_usage_error() {
    check_bad_args(&["--cpus", "two"]);
}

#[test]
fn unknown_option_is_a_usage_error() {
    check_bad_args(&["--no-such-option"]);
}

#[test]
fn bad_serial_target_directory_is_a_usage_error() {
    check_bad_args(&["--serial", "/nonexistent-dir-for-hvprof-tests/serial.log"]);
}

#[test]
fn missing_kernel_option_is_a_usage_error() {
    hvprof(["run"]).run().assert_status(status::USAGE);
}

#[test]
fn missing_initrd_file_is_a_usage_error_naming_the_path() {
    let dir = TempDir::new("failures");
    let missing = dir.join("no-such-initrd.img");
    let out = hvprof_run(
        &fixture(Fixture::Pvh32),
        &["--initrd".as_ref(), missing.as_os_str()],
    )
    .run();
    out.assert_status(status::USAGE)
        .assert_stdout_lacks("pvh32:");
    out.assert_error_line(&[missing.to_str().expect("utf-8 temp path"), "No such file"]);
}

/// Regression: a number of seconds too large for a `Duration` panicked instead of being a
/// usage error.
#[test]
fn huge_durations_are_usage_errors_not_panics() {
    let k = fixture(Fixture::Pvh32);
    let out = hvprof_run(&k, &["--timeout", "1e30"]).run();
    out.assert_status(status::USAGE);
    out.assert_stderr_contains("--timeout must be a positive number of seconds");
    let dir = TempDir::new("huge-duration");
    let out = hvprof([
        "profile",
        "--duration",
        "1e30",
        "--out",
        dir.join("out").to_str().unwrap(),
    ])
    .run();
    out.assert_status(status::USAGE);
    out.assert_stderr_contains("--duration must be a positive number of seconds");
}
