//! Inputs a user names (`--kernel`, `--initrd`, `--firmware`, `--symbols`, a saved
//! profile.json): a FIFO nobody writes to, a character device that never ends, a directory, a
//! sparse file above its limit are refused by name with status 2, at once and unread; a
//! saved profile's `run.kernel` is never opened; and the stop signals a run handles (SIGINT,
//! SIGTERM, SIGHUP, SIGQUIT) end it with status 10 and a complete profile.json.
//!
//! Every refusal here is bounded by a harness limit far above what it takes: the code before
//! files::bounded blocked for ever in open() on the FIFOs and read /dev/zero until memory
//! ran out, so these tests fail on it by hitting the limit.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{self, fixture, hvprof, hvprof_run, status, Fixture, Output, TempDir};

/// Far above the milliseconds a refusal takes; only proves that nothing hangs.
const REFUSED_WITHIN: Duration = Duration::from_secs(30);

/// A FIFO at `dir/name` that nobody ever opens for writing.
fn fifo(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.join(name);
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path; mkfifo takes no other pointer.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
    path
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Asserts a usage error whose error line names `option`, the file and `kind`, and that
/// nothing of the guest ran.
fn refused(out: &Output, option: &str, path: &Path, kind: &str) {
    out.assert_status(status::USAGE);
    out.assert_error_line(&[option, arg(path), kind]);
}

/// A saved profile of one guest object, as docs/profile-json.md shows it, whose
/// `run.kernel` is `kernel`.
fn saved_profile(dir: &TempDir, name: &str, kernel: &Path) -> PathBuf {
    let json = serde_json::json!({
        "format": "hvprof-profile",
        "format_version": 3,
        "hvprof_version": "0.1.0",
        "run": {
            "kernel": arg(kernel), "cmdline": "", "protocol": "PVH",
            "vcpus": 1, "memory_mib": 256, "start_time": "2026-11-21T07:19:48.188Z",
            "wall_time_s": 2.0, "outcome": "guest wrote 0x10 to isa-debug-exit (status 33)",
            "exit_status": 0, "interval_100ns": 10000
        },
        "vcpus": [{ "vcpu": 0, "samples": 100, "attributed": 100, "outside": 0, "lost": 0,
                    "counts": 100, "injected": 0, "hypercalls": 7 }],
        "modules": [],
        "objects": [{
            "id": 1, "owner": "guest", "process": null, "base": "0x40000000", "size": "0x1000",
            "bucket_shift": 4, "source": 0, "source_name": "ProfileTime", "affinity": [0],
            "buckets": 256, "total": 100,
            "counts": [["0x0", 30], ["0x4", 70]],
            "functions": []
        }]
    });
    dir.write(name, json.to_string().as_bytes())
}

#[test]
fn a_fifo_as_kernel_initrd_or_symbols_is_refused_at_once() {
    let dir = TempDir::new("inputs-fifo");
    let pipe = fifo(&dir, "pipe");
    let kind = "is a FIFO, not a regular file";

    let out = hvprof_run(&pipe, &["--timeout", "10"])
        .limit(REFUSED_WITHIN)
        .run();
    refused(&out, "--kernel", &pipe, kind);

    let out = hvprof_run(&fixture(Fixture::Pvh32), &["--initrd", arg(&pipe)])
        .limit(REFUSED_WITHIN)
        .run();
    refused(&out, "--initrd", &pipe, kind);
    out.assert_stdout_lacks("pvh32:");

    let profile = saved_profile(&dir, "profile.json", Path::new("vmlinux"));
    let out = hvprof(["report", arg(&profile), "--symbols", arg(&pipe)])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[arg(&pipe), kind]);

    // A saved profile that is a FIFO, for each command that reads one, and compare's own
    // --symbols.
    for args in [
        vec![
            "compare",
            arg(&profile),
            arg(&profile),
            "--symbols",
            arg(&pipe),
        ],
        vec!["report", arg(&pipe)],
        vec!["compare", arg(&profile), arg(&pipe)],
        vec!["merge", "--out", arg(&dir.join("all.json")), arg(&pipe)],
    ] {
        let out = hvprof(&args).limit(REFUSED_WITHIN).run();
        out.assert_status(status::USAGE);
        out.assert_error_line(&[arg(&pipe), kind]);
    }
    assert!(!dir.join("all.json").exists(), "merge wrote nothing");
}

#[test]
fn a_character_device_as_an_input_is_refused_unread() {
    // The old code read /dev/zero as --kernel until memory ran out.
    let zero = Path::new("/dev/zero");
    let kind = "is a character device, not a regular file";
    let out = hvprof_run(zero, &["--timeout", "10"])
        .limit(REFUSED_WITHIN)
        .run();
    refused(&out, "--kernel", zero, kind);

    let out = hvprof_run(&fixture(Fixture::Pvh32), &["--initrd", "/dev/zero"])
        .limit(REFUSED_WITHIN)
        .run();
    refused(&out, "--initrd", zero, kind);

    let out = hvprof(["run", "--firmware", "/dev/zero"])
        .limit(REFUSED_WITHIN)
        .run();
    refused(&out, "--firmware", zero, kind);

    let dir = TempDir::new("inputs-chardev");
    let profile = saved_profile(&dir, "profile.json", Path::new("vmlinux"));
    let out = hvprof(["report", arg(&profile), "--symbols", "/dev/zero"])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["/dev/zero", kind]);

    let out = hvprof(["report", "/dev/zero"]).limit(REFUSED_WITHIN).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["/dev/zero", kind]);
}

#[test]
fn a_directory_as_an_input_is_refused_by_name() {
    let dir = TempDir::new("inputs-dir");
    let kind = "is a directory, not a regular file";
    let out = hvprof_run(dir.path(), &["--timeout", "10"])
        .limit(REFUSED_WITHIN)
        .run();
    refused(&out, "--kernel", dir.path(), kind);
    let out = hvprof(["report", arg(dir.path())])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[arg(dir.path()), kind]);
}

#[test]
fn a_sparse_file_above_the_limit_is_refused_before_it_is_read() {
    // One byte above each limit, all holes: refusing it takes an fstat; the old code read it
    // whole (1 GiB of zeros) before it found no kernel or no JSON in it.
    let dir = TempDir::new("inputs-sparse");
    let big = |name: &str, size: u64| {
        let p = dir.join(name);
        std::fs::File::create(&p).unwrap().set_len(size).unwrap();
        p
    };
    let kernel = big("kernel", (1 << 30) + 1);
    let out = hvprof_run(&kernel, &["--timeout", "10"])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[
        "--kernel",
        arg(&kernel),
        "1073741825 bytes, above the 1 GiB limit for a kernel image",
    ]);

    let initrd = big("initrd", (1 << 30) + 1);
    let out = hvprof_run(&fixture(Fixture::Pvh32), &["--initrd", arg(&initrd)])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["--initrd", "above the 1 GiB limit for an initrd"]);

    let profile = big("profile.json", (1 << 30) + 1);
    let out = hvprof(["report", arg(&profile)])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[arg(&profile), "above the 1 GiB limit for a saved profile"]);

    let symbols = big("vmlinux", (4 << 30) + 1);
    let saved = saved_profile(&dir, "saved.json", Path::new("vmlinux"));
    let out = hvprof(["report", arg(&saved), "--symbols", arg(&symbols)])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[arg(&symbols), "above the 4 GiB limit for a symbol file"]);
}

#[test]
fn report_and_compare_never_open_the_kernel_a_saved_profile_names() {
    // The profile names a FIFO nobody writes to as its kernel: opening it would block for
    // ever (the old code did, for report and compare alike).
    let dir = TempDir::new("inputs-crafted");
    let pipe = fifo(&dir, "kernel-marker");
    let profile = saved_profile(&dir, "profile.json", &pipe);
    let out = hvprof(["report", arg(&profile)])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(0);
    // The name is printed as the profile's kernel, nothing more.
    out.assert_stdout_contains("kernel-marker");
    let out = hvprof(["compare", arg(&profile), arg(&profile)])
        .limit(REFUSED_WITHIN)
        .run();
    out.assert_status(0);
}

/// `hvprof profile` of the reference guest's long shares workload, stopped by `sig` once the
/// workload runs: status 10, and a complete profile.json that names the signal.
fn signal_ends_a_profile_run(sig: i32, name: &str) {
    let dir = TempDir::new("inputs-signal");
    let out_dir = dir.join("out");
    let mut run = hvprof([
        "profile",
        "--cmdline",
        "scenario=shares shares.ms=60000",
        "--quiet",
        "--out",
        arg(&out_dir),
    ])
    .limit(Duration::from_secs(120))
    .spawn();
    run.wait_for_stdout("refguest: scenario shares start", Duration::from_secs(60));
    run.signal(sig);
    let out = run.wait();
    out.assert_status(status::SIGNALLED);
    out.assert_error_line(&[&format!("stopped by {name}")]);
    let text = std::fs::read_to_string(out_dir.join("profile.json"))
        .unwrap_or_else(|e| panic!("profile.json: {e}\n{out}"));
    let v: serde_json::Value = serde_json::from_str(&text).expect("profile.json parses");
    assert_eq!(v["run"]["outcome"], format!("stopped by {name}"), "{v}");
    assert_eq!(v["run"]["exit_status"], status::SIGNALLED);
    let samples: u64 = v["vcpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["samples"].as_u64().unwrap())
        .sum();
    assert!(samples > 0, "samples were taken before the signal\n{v}");
    for f in ["profile.pb.gz", "flamegraph.svg", "report.txt"] {
        assert!(out_dir.join(f).exists(), "{f}\n{out}");
    }
    // The saved profile reads back.
    harness::hvprof(["report", arg(&out_dir.join("profile.json"))])
        .run()
        .assert_status(0);
}

#[test]
fn sighup_ends_a_profile_run_with_a_complete_profile() {
    signal_ends_a_profile_run(libc::SIGHUP, "SIGHUP");
}

#[test]
fn sigquit_ends_a_profile_run_with_a_complete_profile() {
    signal_ends_a_profile_run(libc::SIGQUIT, "SIGQUIT");
}

/// True when the `field` line of /proc/PID/status ("SigBlk", "SigIgn") has `sig`'s bit.
fn sig_bit(pid: u32, field: &str, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(":"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    mask & (1 << (sig - 1)) != 0
}

#[test]
fn under_nohup_a_sighup_does_not_end_the_run() {
    let dir = TempDir::new("inputs-nohup");
    let out_dir = dir.join("out");
    let mut child = std::process::Command::new("nohup")
        .arg(harness::hvprof_bin())
        .args(["profile", "--duration", "2", "--quiet", "--serial", "null"])
        .args(["--cmdline", "scenario=shares shares.ms=60000", "--out"])
        .arg(&out_dir)
        .env_remove("_NT_SYMBOL_PATH")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nohup (coreutils)");
    let pid = child.id();
    // Once nohup has become hvprof and hvprof has blocked its stop signals, send SIGHUP.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(sig_bit(pid, "SigIgn", libc::SIGHUP) && sig_bit(pid, "SigBlk", libc::SIGTERM)) {
        assert!(
            std::time::Instant::now() < deadline,
            "hvprof never blocked SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = i32::try_from(pid).unwrap();
    // SAFETY: kill takes no pointers; `pid` is our unreaped child.
    let rc = unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(rc, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("hvprof still running 60 s into a 2 s profile");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    let text = std::fs::read_to_string(out_dir.join("profile.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["run"]["outcome"], "stopped by --duration", "{v}");
}

/// SIGTERM or SIGHUP at many points of a short `hvprof profile` run: before hvprof handles
/// signals, while it builds the VM, while the guest runs, while the results are written,
/// after. Whatever the moment, the run never hangs, the out directory never holds a partial
/// profile.json (it holds the previous run's, complete, or this one's), and the status is
/// the documented one: 10 with this run's profile when the signal ended the run; the run's
/// own status when it came after the run; death by the signal only before hvprof began to
/// handle signals, with nothing of this run written.
#[test]
fn a_stop_signal_at_any_point_of_a_run_loses_nothing_and_hangs_nothing() {
    let dir = TempDir::new("inputs-signal-points");
    let out_dir = dir.join("out");
    let profile = |signal_after: Option<(Duration, i32)>| {
        let run = hvprof([
            "profile",
            "--cmdline",
            "scenario=shares shares.ms=400",
            "--quiet",
            "--serial",
            "null",
            "--out",
            arg(&out_dir),
        ])
        .limit(Duration::from_secs(60))
        .spawn();
        if let Some((after, sig)) = signal_after {
            std::thread::sleep(after);
            // The run may be over already: a failed kill is one of the outcomes.
            let pid = i32::try_from(run.pid()).unwrap();
            // SAFETY: kill(2) takes no pointers; the child is not reaped before `wait`.
            unsafe { libc::kill(pid, sig) };
        }
        run.wait()
    };
    // A first, whole run: the "previous profile" every later one must not damage, and how
    // long a run takes here, to spread the signals over.
    let first = profile(None);
    assert!(matches!(first.code(), Some(0 | 1)), "{first}");
    let whole = first.elapsed;
    let start_of = |p: &Path| -> String {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap())
            .unwrap_or_else(|e| panic!("{} is not whole JSON: {e}", p.display()));
        v["run"]["start_time"].as_str().unwrap().to_string()
    };
    let json = out_dir.join("profile.json");
    const POINTS: u32 = 16;
    for i in 0..=POINTS {
        let before = start_of(&json);
        let sig = if i % 2 == 0 {
            libc::SIGTERM
        } else {
            libc::SIGHUP
        };
        let after = whole * i / POINTS;
        let out = profile(Some((after, sig)));
        let now = start_of(&json);
        eprintln!("signal {sig} after {after:?}: {}", out.status);
        match (out.code(), out.status.signal()) {
            (Some(status::SIGNALLED), _) => {
                assert_ne!(now, before, "status 10 without this run's profile\n{out}")
            }
            (Some(0 | 1), _) => {
                assert_ne!(now, before, "a finished run without its profile\n{out}")
            }
            (None, Some(s)) if s == sig => assert_eq!(now, before, "killed, yet wrote\n{out}"),
            _ => panic!("signal {sig} after {after:?}: unexpected end\n{out}"),
        }
        for f in ["profile.pb.gz", "flamegraph.svg", "report.txt"] {
            assert!(out_dir.join(f).exists(), "{f} lost\n{out}");
        }
    }
}

/// `report --disk-image`: a qcow2 image (qemu-img's, of an ext4 file system mke2fs made)
/// holding the file a saved profile's process mapped is read under the report's system-call
/// filter (the qcow2 reader's vectored reads included: the first version was killed by it)
/// and names the module from it; an image with no file system, or none at all, is refused by
/// name with status 2.
#[test]
fn a_disk_image_is_read_for_a_mapped_file_and_a_bad_one_refused() {
    let dir = TempDir::new("inputs-disk-image");
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/true", root.join("bin/prog")).unwrap();
    let fs = dir.join("root.ext4");
    harness::tool(
        "mke2fs",
        "e2fsprogs",
        &["-q", "-t", "ext4", "-d", arg(&root), arg(&fs), "8M"],
    );
    let image = dir.join("root.qcow2");
    harness::tool(
        "qemu-img",
        "qemu-utils",
        &["convert", "-f", "raw", "-O", "qcow2", arg(&fs), arg(&image)],
    );
    let mut profile: serde_json::Value = serde_json::from_slice(include_bytes!(
        "../../vmm/report/testdata/profile-v4-processes.json"
    ))
    .unwrap();
    profile["processes"][0]["mappings"] = serde_json::json!([
        { "start": "0x400000", "end": "0x401000", "offset": "0x0", "path": "/bin/prog" }
    ]);
    let saved = dir.write("profile.json", profile.to_string().as_bytes());

    let out = dir.join("out");
    let run = hvprof([
        "report",
        arg(&saved),
        "--out",
        arg(&out),
        "--disk-image",
        arg(&image),
    ])
    .limit(REFUSED_WITHIN)
    .run();
    run.assert_status(status::CLEAN);
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("profile.json")).unwrap()).unwrap();
    let prog = written["modules"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == "prog");
    let want = format!("the disk image {}", arg(&image));
    assert!(
        prog.is_some_and(|m| m["path"] == want.as_str()),
        "no module prog read from the image: {}\n{run}",
        written["modules"]
    );

    let blank = dir.join("blank.img");
    std::fs::File::create(&blank)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    for (bad, why) in [
        (
            &blank,
            "no ext2, ext3 or ext4 file system on it or its partitions",
        ),
        (&dir.join("none.img"), "No such file or directory"),
    ] {
        let run = hvprof(["report", arg(&saved), "--disk-image", arg(bad)])
            .limit(REFUSED_WITHIN)
            .run();
        refused(&run, "--disk-image", bad, why);
    }
}
