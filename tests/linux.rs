//! Boots Debian's Linux bzImage (package linux-image-amd64) as far as this
//! machine allows. On a PVM-based KVM, guest CPL0 code is emulated and the XZ
//! decompressor runs at ~9 KB/s, so Linux never finishes booting here: the
//! test checks the decompressor's first line on COM1 and treats reaching
//! `--timeout` as expected.
//!
//! What Debian's 6.1 decompressor prints: it is built without
//! CONFIG_X86_VERBOSE_BOOTUP, so "early console in extract_kernel" and
//! "Decompressing Linux..." are compiled out. Its unconditional output is
//! warnings; with `nokaslr` on the command line it prints "KASLR disabled:
//! 'nokaslr' on cmdline." right after setting up the early serial console
//! (from `earlyprintk=serial` or `console=ttyS0`) and before decompressing.
//! Under QEMU on this machine that line came 4.1 s after start, 1.3 s after
//! the real-mode setup code (which a VMM using the 64-bit boot protocol skips).

use std::path::PathBuf;
use std::time::Duration;

use crate::harness::host::Budget;
use crate::harness::{hvprof_run, status};

const CMDLINE: &str = "console=ttyS0 earlyprintk=serial,ttyS0,115200 nokaslr";
/// The decompressor's line that the test waits for.
const EARLY_LINE: &str = "KASLR disabled: 'nokaslr' on cmdline.";
/// Up to the early line: the 64-bit entry and the decompressor's set-up, in guest-kernel
/// instructions of the harness's calibration loop. It came after ~2 s where the loop ran at
/// 0.33 us an instruction (about 6M); the floor covers hosts that run it natively.
const EARLY_BOOT: Budget = Budget {
    insns: 8_000_000,
    margin: 8,
    floor: Duration::from_secs(40),
};

/// The newest /boot/vmlinuz-* (or $HVPROF_TEST_BZIMAGE); fails if none.
pub(crate) fn find_bzimage() -> PathBuf {
    if let Some(p) = std::env::var_os("HVPROF_TEST_BZIMAGE") {
        return PathBuf::from(p);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/boot")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "no Linux bzImage in /boot: install Debian's linux-image-amd64 \
             (apt-get install -y linux-image-amd64), or set HVPROF_TEST_BZIMAGE"
        )
    })
}

#[test]
fn linux_bzimage_decompressor_prints_on_com1() {
    let kernel = find_bzimage();
    let limit = EARLY_BOOT.limit();
    let timeout = limit.timeout_arg();
    let mut run = hvprof_run(
        &kernel,
        &[
            "--memory",
            "512",
            "--cmdline",
            CMDLINE,
            "--timeout",
            timeout.as_str(),
        ],
    )
    .host_limit(&limit)
    .spawn();
    // The kernel cannot finish booting here (its decompressor is emulated), so stop the run
    // as soon as the early line is out; that also exercises SIGTERM during a Linux boot.
    run.wait_for_stdout(EARLY_LINE, limit.timeout);
    run.signal(libc::SIGTERM);
    let out = run.wait();
    out.assert_status(status::SIGNALLED);
    out.assert_stdout_contains(EARLY_LINE);
}
