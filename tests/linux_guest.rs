//! A real Linux (images/linux: Debian's linux-source-6.1, tinyconfig plus hvprof.config, a
//! busybox initramfs whose /init reads its steps from the command line) booted as a PVH ELF
//! with nothing but `console=ttyS0`, and on a PVM-based KVM host the host-quirk options. Its
//! drivers, not ours, judge the platform: PCI found through ACPI, virtio-blk over MSI-X, the
//! PM timer, rtc_cmos, one CPU package, power-off and reboot through ACPI.
//!
//! The kernel is built by `images/linux/build.sh` (which .ci/run runs) into target/linux, or
//! the directory $HVPROF_TEST_LINUX_DIR names. A boot takes about a minute on a host whose
//! guest kernel code is emulated, seconds on VMX/SVM.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::harness::host::Budget;
use crate::harness::{hvprof, hvprof_run, pprof, status, tool, Output, TempDir};

/// Guest memory: enough for busybox, the disk's page cache and the workload. Where kernel code
/// is emulated, setting up and freeing memory costs time in proportion (256 MiB took twice as
/// long to boot as 128 MiB; 64 MiB was no faster than 128).
const MEMORY_MIB: &str = "128";

/// A boot of the test guest to its power-off, in guest-kernel instructions of the harness's
/// calibration loop: 31-35 s a test (boot, facts, disk, power-off; or the profiled workload)
/// where the loop ran at 0.27 us an instruction on an idle Intel host of the PVM kind, so
/// about 120M; 150M leaves room for the second vCPU. The margin covers a host busier during
/// the boot than during the calibration (two guests may boot at once on two cores); the
/// floor, hosts that run kernel code at native speed.
const BOOT: Budget = Budget {
    insns: 150_000_000,
    margin: 4,
    floor: Duration::from_secs(120),
};

/// The test guest's kernel and initramfs.
struct Guest {
    vmlinux: PathBuf,
    initramfs: PathBuf,
}

fn guest() -> Guest {
    let dir = std::env::var_os("HVPROF_TEST_LINUX_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::harness::workspace_root().join("target/linux"));
    let g = Guest {
        vmlinux: dir.join("vmlinux"),
        initramfs: dir.join("initramfs.cpio"),
    };
    assert!(
        g.vmlinux.is_file() && g.initramfs.is_file(),
        "no Linux test guest in {}: build it with `bash images/linux/build.sh` \
         (apt-get install linux-source-6.1 busybox-static bc bison flex libelf-dev), \
         or set HVPROF_TEST_LINUX_DIR",
        dir.display()
    );
    g
}

/// The kernel command line: the console, the host-quirk options where this host needs them
/// (a PVM-based KVM: see images/linux/README.md), and the test's own words.
fn cmdline(words: &str) -> String {
    let quirks = if Path::new("/sys/module/kvm_pvm").exists() {
        " noxsave clearcpuid=popcnt,smap,cx16 pvm_host_quirks"
    } else {
        ""
    };
    format!("console=ttyS0{quirks} {words}")
}

/// The value of the guest's "hvtest: KEY=VALUE" line; fails the test when it is missing.
fn fact<'a>(out: &'a Output, key: &str) -> &'a str {
    out.stdout_field(&format!("hvtest: {key}="))
        .unwrap_or_else(|| panic!("the guest reported no {key}\n{out}"))
}

/// A 16 MiB ext2 image holding in.txt.
fn ext2_image(dir: &TempDir) -> PathBuf {
    let content = dir.join("content");
    std::fs::create_dir_all(&content).unwrap();
    std::fs::write(content.join("in.txt"), "hello from the host\n").unwrap();
    let img = dir.join("disk.img");
    let (c, i) = (content.to_str().unwrap(), img.to_str().unwrap());
    tool(
        "mke2fs",
        "e2fsprogs",
        &["-q", "-t", "ext2", "-d", c, i, "16M"],
    );
    img
}

/// debugfs's `cat` of `path` in the ext2 image.
fn read_back(img: &Path, path: &str) -> String {
    let out = Command::new("debugfs")
        .args(["-R", &format!("cat {path}")])
        .arg(img)
        .output()
        .expect("cannot run debugfs: install Debian's e2fsprogs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Boots with `cpus` vCPUs and a disk, checks the platform as the guest saw it, its writes on
/// the host, and a clean power-off.
fn boot_and_check(cpus: u32) {
    let g = guest();
    let dir = TempDir::new("linux");
    let img = ext2_image(&dir);
    let disk = img.to_str().unwrap();
    let cpus_arg = cpus.to_string();
    let limit = BOOT.limit();
    let timeout = limit.timeout_arg();
    let cmd = cmdline("hvtest=facts,disk hvend=poweroff");
    let out = hvprof_run(
        &g.vmlinux,
        &[
            "--initrd",
            g.initramfs.to_str().unwrap(),
            "--cmdline",
            &cmd,
            "--memory",
            MEMORY_MIB,
            "--cpus",
            &cpus_arg,
            "--disk",
            disk,
            "--timeout",
            &timeout,
        ],
    )
    .host_limit(&limit)
    .run();
    out.assert_status(status::CLEAN)
        .assert_stderr_contains("guest powered off");
    let online = if cpus == 1 {
        "0".to_string()
    } else {
        format!("0-{}", cpus - 1)
    };
    assert_eq!(fact(&out, "cpus"), online, "{out}");
    assert_eq!(fact(&out, "packages"), "1", "one package\n{out}");
    // PCI enumerated through the ACPI PCI root, without `pci=`: the host bridge and the disk.
    assert!(fact(&out, "pci").contains("0000:00:02.0"), "{out}");
    assert!(fact(&out, "clocksources").contains("acpi_pm"), "{out}");
    assert!(fact(&out, "rtc").starts_with("rtc_cmos"), "{out}");
    assert_eq!(fact(&out, "facs"), "yes", "{out}");
    let msix: u32 = fact(&out, "msix").parse().unwrap();
    assert!(
        msix >= 2,
        "virtio-blk should use MSI-X (config and queue vectors)\n{out}"
    );
    assert_eq!(fact(&out, "disk_in"), "hello from the host", "{out}");
    assert_eq!(fact(&out, "disk"), "done", "{out}");
    // On the host: the file system is clean and holds what the guest wrote.
    tool("e2fsck", "e2fsprogs", &["-f", "-n", disk]);
    assert_eq!(
        read_back(&img, "/out.txt"),
        format!("written by linux on {online} cpus\n")
    );
    assert_eq!(read_back(&img, "/zeros").len(), 256 * 4096);
}

#[test]
fn one_vcpu_finds_its_disk_through_acpi_and_powers_off() {
    boot_and_check(1);
}

#[test]
fn two_vcpus_are_one_package_and_power_off() {
    boot_and_check(2);
}

/// `hvprof profile --kernel vmlinux` of a busybox workload names kernel functions from
/// vmlinux's symbols, leaves user-mode samples to no module, and a `reboot` ends the run as a
/// reset.
#[test]
fn profile_names_linux_kernel_functions() {
    let g = guest();
    let dir = TempDir::new("linux-profile");
    let out_dir = dir.join("out");
    let limit = BOOT.limit();
    let timeout = limit.timeout_arg();
    let cmd = cmdline("hvtest=work hvwork=200000 hvend=reboot");
    let out = hvprof([
        "profile",
        "--kernel",
        g.vmlinux.to_str().unwrap(),
        "--initrd",
        g.initramfs.to_str().unwrap(),
        "--cmdline",
        &cmd,
        "--memory",
        MEMORY_MIB,
        "--quiet",
        "--timeout",
        &timeout,
        "--out",
        out_dir.to_str().unwrap(),
    ])
    .host_limit(&limit)
    .run();
    out.assert_status(status::CLEAN)
        .assert_stderr_contains("guest requested a reset");
    assert_eq!(fact(&out, "work"), "done", "{out}");
    let report = std::fs::read_to_string(out_dir.join("report.txt")).unwrap();
    let symbols = kernel_text_symbols(&g.vmlinux);
    let is_kernel_fn = |word: &str| {
        let f = word.strip_prefix("vmlinux!").unwrap_or(word);
        let f = f.split('+').next().unwrap_or(f);
        symbols.iter().any(|s| s == f)
    };
    let named: Vec<&str> = report
        .split_whitespace()
        .filter(|w| w.starts_with("vmlinux!") && is_kernel_fn(w))
        .collect();
    assert!(
        named.len() >= 3,
        "report.txt names fewer than 3 vmlinux functions: {named:?}\n{report}"
    );
    let (top, _) = pprof(&out_dir, "-top", &[]);
    assert!(
        top.lines().any(|l| l.split_whitespace().any(&is_kernel_fn)),
        "go tool pprof -top names no vmlinux function\n{top}"
    );
    // The shell loop runs in user mode for a second or more: its samples belong to no module,
    // never to vmlinux (whose per-CPU segment is linked at address 0).
    let unknown: u64 = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("[unknown]"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    assert!(
        unknown > 0,
        "no user-mode samples outside vmlinux\n{report}"
    );
}

/// The text symbols (t/T) of vmlinux, by `nm`.
fn kernel_text_symbols(vmlinux: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .arg(vmlinux)
        .output()
        .expect("cannot run nm: install Debian's binutils");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_, kind, name) = (w.next()?, w.next()?, w.next()?);
            matches!(kind, "t" | "T").then(|| name.to_string())
        })
        .collect()
}
