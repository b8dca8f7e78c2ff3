//! Every file hvprof writes, under faults: a full file system, a SIGKILL during the write, a
//! symlink planted at an output's name, an unwritable `--out`; and the arguments refused up
//! front. The file-system cases mount small tmpfs instances, so they need root (as the test
//! suite runs in CI).
//!
//! The invariant: each output file is either its complete previous version or its complete
//! new one, never partial; a temporary left by a SIGKILL is named `.NAME.PID.N.part`, never
//! a final name; a bad `--out` ends with status 2 before any VM runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::harness::{self, fixture, hvprof, status, Fixture, TempDir};

/// Exit status: the host failed (docs/architecture.md; the harness names only the others).
const HOST_ERROR: i32 = 12;

/// The four files of a profile directory.
const FILES: [&str; 4] = [
    "profile.json",
    "profile.pb.gz",
    "flamegraph.svg",
    "report.txt",
];

/// Two saved runs of the reference guest (their counts differ) and the report directories
/// `report --out` writes from each; and the profile `merge` makes of the two.
struct Saved {
    _dir: TempDir,
    a: PathBuf,
    b: PathBuf,
    out_a: PathBuf,
    out_b: PathBuf,
    merged: PathBuf,
}

fn saved() -> &'static Saved {
    static SAVED: OnceLock<Saved> = OnceLock::new();
    SAVED.get_or_init(|| {
        let dir = TempDir::for_process("outputs-saved");
        for run in ["run-a", "run-b"] {
            let out = dir.join(run);
            hvprof(["demo", "--serial", "null", "--out", out.to_str().unwrap()])
                .run()
                .assert_status(0);
        }
        let (a, b) = (
            dir.join("run-a/profile.json"),
            dir.join("run-b/profile.json"),
        );
        for (p, out) in [(&a, "out-a"), (&b, "out-b")] {
            report(p, &dir.join(out)).assert_status(0);
        }
        let merged = dir.join("merged.json");
        merge(&merged, &a, &b).assert_status(0);
        Saved {
            a,
            b,
            out_a: dir.join("out-a"),
            out_b: dir.join("out-b"),
            merged,
            _dir: dir,
        }
    })
}

fn report(profile: &Path, out: &Path) -> harness::Output {
    hvprof([
        "report",
        profile.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .run()
}

fn merge(out: &Path, a: &Path, b: &Path) -> harness::Output {
    hvprof([
        "merge",
        "--out",
        out.to_str().unwrap(),
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ])
    .run()
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A temporary the atomic writer may leave after a SIGKILL: `.NAME.PID.N.part`.
fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".part")
}

/// Copies the four files of `from` into `to`.
fn put_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in FILES {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// A tmpfs mounted over a fresh temporary directory, unmounted when dropped.
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    fn new(tag: &str, size: &str) -> Tmpfs {
        let dir = TempDir::new(tag);
        sh(
            "mount",
            &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"],
            dir.path(),
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount_read_only(&self) {
        sh("mount", &["-o", "remount,ro"], self.path());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn sh(cmd: &str, args: &[&str], path: &Path) {
    let st = Command::new(cmd).args(args).arg(path).status().unwrap();
    assert!(
        st.success(),
        "{cmd} {args:?} {}: {st} (these tests mount tmpfs and need root)",
        path.display()
    );
}

/// Fills the file system of `filler` until a write fails, then frees `free` bytes.
fn fill(filler: &Path, free: u64) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(filler)
        .unwrap();
    let page = [0u8; 4096];
    while f.write_all(&page).is_ok() {}
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(free)).unwrap();
}

#[test]
fn a_full_file_system_keeps_every_previous_report_file() {
    let s = saved();
    let fs = Tmpfs::new("outputs-full", "64k");
    let out = fs.path().join("out");
    let filler = fs.path().join("filler");
    let mut failures = 0;
    // From no room at all to enough room for the new files (~25 KB), page by page.
    for free_pages in 0..10u64 {
        let _ = std::fs::remove_file(&filler);
        let _ = std::fs::remove_dir_all(&out);
        report(&s.a, &out).assert_status(0);
        fill(&filler, free_pages * 4096);
        let run = report(&s.b, &out);
        let expected = if run.code() == Some(0) {
            &s.out_b
        } else {
            failures += 1;
            run.assert_status(HOST_ERROR);
            run.assert_error_line(&[out.to_str().unwrap(), "No space left on device"]);
            &s.out_a
        };
        for f in FILES {
            assert_eq!(
                read(&out.join(f)),
                read(&expected.join(f)),
                "{f} with {free_pages} pages free is the complete {} version\n{run}",
                if expected == &s.out_a { "old" } else { "new" }
            );
        }
        assert_eq!(names(&out), sorted_files(), "no temporary is left\n{run}");
    }
    assert!(failures > 0, "no fill level made the write fail");
}

/// [`FILES`] as [`names`] lists them.
fn sorted_files() -> Vec<String> {
    let mut v: Vec<String> = FILES.map(String::from).to_vec();
    v.sort();
    v
}

#[test]
fn a_full_file_system_after_a_run_is_a_host_error_and_keeps_the_previous_profile() {
    let s = saved();
    let fs = Tmpfs::new("outputs-full-run", "64k");
    let out = fs.path().join("out");
    put_files(&s.out_a, &out);
    fill(&fs.path().join("filler"), 0);
    let run = hvprof(["demo", "--serial", "null", "--out", out.to_str().unwrap()]).run();
    run.assert_status(HOST_ERROR);
    run.assert_error_line(&[out.to_str().unwrap(), "No space left on device"]);
    for f in FILES {
        assert_eq!(read(&out.join(f)), read(&s.out_a.join(f)), "{f}\n{run}");
    }
}

/// Kills `hvprof` `args` at 200 points spread evenly over 1.25 times the length of one whole
/// run (measured first: the points scale with the host's speed, and the write, at the end of
/// the run, falls among them); before each, `reset` puts the old files in place; after each,
/// `check` sees what is there, whatever the kill interrupted.
fn kill_at_many_points(args: &[&str], reset: impl Fn(), check: impl Fn(&harness::Output)) {
    reset();
    let whole = hvprof(args).run();
    whole.assert_status(0);
    check(&whole);
    for i in 0..200u32 {
        reset();
        let running = hvprof(args).spawn();
        std::thread::sleep(whole.elapsed * i / 160);
        running.signal(libc::SIGKILL);
        check(&running.wait());
    }
}

#[test]
fn sigkill_during_report_out_leaves_old_or_new_files_never_partial() {
    let s = saved();
    let dir = TempDir::new("outputs-kill-report");
    let out = dir.join("out");
    let args = [
        "report",
        s.b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let reset = || {
        let _ = std::fs::remove_dir_all(&out);
        put_files(&s.out_a, &out);
    };
    kill_at_many_points(&args, reset, |run| {
        for f in FILES {
            let now = read(&out.join(f));
            assert!(
                now == read(&s.out_a.join(f)) || now == read(&s.out_b.join(f)),
                "{f} is neither the old nor the new version ({} bytes)\n{run}",
                now.len()
            );
        }
        for name in names(&out) {
            assert!(
                FILES.contains(&name.as_str()) || is_temporary(&name),
                "{name} is neither an output nor an obvious temporary\n{run}"
            );
        }
    });
}

#[test]
fn sigkill_during_merge_out_leaves_old_or_new_file_never_partial() {
    let s = saved();
    let dir = TempDir::new("outputs-kill-merge");
    let out = dir.join("all.json");
    let args = [
        "merge",
        "--out",
        out.to_str().unwrap(),
        s.a.to_str().unwrap(),
        s.b.to_str().unwrap(),
    ];
    let reset = || {
        for name in names(dir.path()) {
            std::fs::remove_file(dir.join(&name)).unwrap();
        }
        std::fs::copy(&s.a, &out).unwrap();
    };
    kill_at_many_points(&args, reset, |run| {
        let now = read(&out);
        assert!(
            now == read(&s.a) || now == read(&s.merged),
            "all.json is neither the old nor the merged profile ({} bytes)\n{run}",
            now.len()
        );
        for name in names(dir.path()) {
            assert!(
                name == "all.json" || is_temporary(&name),
                "{name} is neither the output nor an obvious temporary\n{run}"
            );
        }
    });
}

#[test]
fn a_symlink_planted_at_an_output_is_replaced_and_its_target_untouched() {
    let s = saved();
    let dir = TempDir::new("outputs-symlink");
    let victim = dir.write("victim", b"precious, not hvprof's");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("report.txt")).unwrap();
    let merged = dir.join("merged.json");
    std::os::unix::fs::symlink(&victim, &merged).unwrap();
    report(&s.a, &out).assert_status(0);
    merge(&merged, &s.a, &s.b).assert_status(0);
    assert_eq!(read(&victim), b"precious, not hvprof's");
    for (path, expected) in [
        (out.join("report.txt"), s.out_a.join("report.txt")),
        (merged.clone(), s.merged.clone()),
    ] {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file(), "{}: {meta:?}", path.display());
        assert_eq!(read(&path), read(&expected), "{}", path.display());
    }
}

/// The logs a run streams (`--serial FILE`, `--debugcon FILE`) are never written through a
/// planted symlink, and a FIFO nobody reads is refused instead of blocking the start.
#[test]
fn run_logs_refuse_a_planted_symlink_and_an_unread_fifo() {
    let dir = TempDir::new("outputs-logs");
    let victim = dir.write("victim", b"precious, not hvprof's");
    let kernel = fixture(Fixture::DebugExit {
        value: harness::FIXTURE_OK,
        width: 1,
    });
    let link = dir.join("serial.log");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = dir.join("fifo");
    sh("mkfifo", &[], &fifo);
    for (option, path, why) in [
        ("--serial", &link, "symbolic link"),
        ("--debugcon", &link, "symbolic link"),
        ("--serial", &fifo, "FIFO nobody is reading"),
    ] {
        let out = harness::hvprof_run(&kernel, &[option, path.to_str().unwrap()])
            .limit(Duration::from_secs(30))
            .run();
        out.assert_status(status::USAGE);
        out.assert_error_line(&[path.to_str().unwrap(), why]);
    }
    assert_eq!(read(&victim), b"precious, not hvprof's");
    // A regular file is written as before.
    let log = dir.join("plain.log");
    harness::hvprof_run(&kernel, &["--serial", log.to_str().unwrap()])
        .run()
        .assert_status(status::debug_exit(harness::FIXTURE_OK));
    assert!(String::from_utf8_lossy(&read(&log)).contains("debug_exit: writing"));
}

/// An unwritable `--out` of a run: status 2 at once, the path named, no guest output. A run
/// would last 30 s; the bound only proves that none started.
fn refused_before_the_run(out: &Path, why: &str) {
    let run = hvprof([
        "profile",
        "--duration",
        "30",
        "--out",
        out.to_str().unwrap(),
    ])
    .limit(Duration::from_secs(60))
    .run();
    run.assert_status(status::USAGE);
    run.assert_error_line(&[out.to_str().unwrap(), why]);
    assert_eq!(run.stdout, "", "no guest ran\n{run}");
    run.assert_elapsed_below(Duration::from_secs(20));
}

#[test]
fn profile_out_on_a_read_only_mount_fails_before_the_run() {
    let fs = Tmpfs::new("outputs-ro", "64k");
    std::fs::create_dir(fs.path().join("existing")).unwrap();
    fs.remount_read_only();
    refused_before_the_run(&fs.path().join("existing"), "Read-only file system");
    refused_before_the_run(&fs.path().join("new/sub"), "Read-only file system");
}

#[test]
fn profile_out_that_is_a_file_fails_before_the_run() {
    let dir = TempDir::new("outputs-file");
    let file = dir.write("file", b"x");
    refused_before_the_run(&file, "not a directory");
    refused_before_the_run(&file.join("sub"), "Not a directory");
    let run = hvprof(["demo", "--out", file.to_str().unwrap()]).run();
    run.assert_status(status::USAGE);
    run.assert_error_line(&[file.to_str().unwrap()]);
    assert_eq!(run.stdout, "", "no guest ran\n{run}");
    assert_eq!(read(&file), b"x");
}

#[test]
fn tools_refuse_an_unwritable_output_before_reading_and_name_it() {
    let s = saved();
    let fs = Tmpfs::new("outputs-ro-tools", "64k");
    fs.remount_read_only();
    let ro = |name: &str| fs.path().join(name);
    let (a, b) = (s.a.to_str().unwrap(), s.b.to_str().unwrap());
    let junit = ro("junit.xml");
    let md = ro("summary.md");
    let diff = ro("diff");
    let merged = ro("all.json");
    let report_out = ro("report");
    let cases: [(Vec<&str>, &Path); 5] = [
        (
            vec!["compare", a, b, "--junit", junit.to_str().unwrap()],
            &junit,
        ),
        (
            vec!["compare", a, b, "--markdown", md.to_str().unwrap()],
            &md,
        ),
        (
            vec!["compare", a, b, "--out", diff.to_str().unwrap()],
            &diff,
        ),
        (
            vec!["merge", "--out", merged.to_str().unwrap(), a, b],
            &merged,
        ),
        (
            vec!["report", a, "--out", report_out.to_str().unwrap()],
            &report_out,
        ),
    ];
    for (args, path) in cases {
        let run = hvprof(args).run();
        run.assert_status(status::USAGE);
        run.assert_error_line(&[path.to_str().unwrap(), "Read-only file system"]);
        // Nothing was read or compared: no table was printed.
        assert_eq!(run.stdout, "", "{run}");
    }
}

#[test]
fn no_host_profile_refuses_the_options_of_the_host_profile() {
    let dir = TempDir::new("outputs-nohost");
    let out = dir.path().to_str().unwrap();
    for (flag, value) in [
        ("--cpl", "3"),
        ("--range", "0x1000:0x2000"),
        ("--bucket", "6"),
        ("--cr3", "0x1000"),
        ("--stack-depth", "4"),
    ] {
        let run = hvprof([
            "profile",
            "--duration",
            "30",
            "--no-host-profile",
            flag,
            value,
            "--out",
            out,
        ])
        .run();
        run.assert_status(status::USAGE);
        run.assert_stderr_contains(&format!("'--no-host-profile' cannot be used with '{flag}"));
        assert_eq!(run.stdout, "", "no guest ran\n{run}");
    }
}

#[test]
fn interval_out_of_range_is_refused_not_clamped() {
    let dir = TempDir::new("outputs-interval");
    let kernel = fixture(Fixture::DebugExit {
        value: 0x21,
        width: 1,
    });
    for bad in ["0", "999", "10000001"] {
        let run = hvprof([
            "profile",
            "--kernel",
            kernel.to_str().unwrap(),
            "--interval",
            bad,
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .run();
        run.assert_status(status::USAGE);
        run.assert_error_line(&[&format!("--interval {bad}"), "1000 to 10000000"]);
    }
}

#[test]
fn interval_with_the_built_in_guest_holds_for_the_whole_run() {
    // The default scenario sets ProfileTime's interval (to 10000 unless told) once it starts;
    // the run's profile records the interval in force at its end.
    let dir = TempDir::new("outputs-interval-builtin");
    let out = dir.join("out");
    let run = hvprof([
        "profile",
        "--interval",
        "5000",
        "--quiet",
        "--serial",
        "null",
        "--out",
        out.to_str().unwrap(),
    ])
    .run();
    run.assert_status(0);
    let json = String::from_utf8(read(&out.join("profile.json"))).unwrap();
    assert!(
        json.contains("\"interval_100ns\": 5000") || json.contains("\"interval_100ns\":5000"),
        "the run kept --interval 5000\n{json}\n{run}"
    );
}

#[test]
fn interval_the_built_in_guest_cannot_keep_is_refused() {
    let dir = TempDir::new("outputs-interval-refused");
    for (cmdline, why) in [
        (
            "scenario=bench",
            "scenario=bench sets its own sampling intervals",
        ),
        (
            "scenario=shares shares.interval=2000",
            "--interval 5000 and shares.interval=2000 on the command line disagree",
        ),
    ] {
        let run = hvprof([
            "profile",
            "--duration",
            "30",
            "--interval",
            "5000",
            "--cmdline",
            cmdline,
            "--out",
            dir.path().to_str().unwrap(),
        ])
        .run();
        run.assert_status(status::USAGE);
        run.assert_error_line(&[why]);
        assert_eq!(run.stdout, "", "no guest ran\n{run}");
    }
}

#[test]
fn bench_refuses_zero_rounds_and_zero_kicks() {
    for flag in ["--rounds", "--kicks"] {
        let run = hvprof(["bench", flag, "0"]).run();
        run.assert_status(status::USAGE);
        run.assert_stderr_contains(&format!("invalid value '0' for '{flag}"));
    }
}

#[test]
fn an_output_directory_the_user_may_not_write_is_refused_up_front() {
    // Root writes anywhere: the tools run as nobody, on a directory only root may write.
    let s = saved();
    let dir = TempDir::new("outputs-eacces");
    let locked = dir.join("locked");
    std::fs::create_dir(&locked).unwrap();
    let target = locked.join("all.json");
    let run = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(harness::hvprof_bin())
        .args(["merge", "--out"])
        .args([&target, &s.a, &s.b])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(status::USAGE), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "hvprof: error: cannot write {}: Permission denied",
            target.display()
        )),
        "{stderr}"
    );
    assert_eq!(names(&locked), Vec::<String>::new());
}
