//! Timelines in a real viewer: the speedscope web app (npm package `speedscope`, pinned by
//! tests/viewer/package-lock.json) opens a `perf script` text in Debian's headless Chromium,
//! served on loopback with every other host unreachable, and tests/viewer/speedscope.mjs reads
//! back from the page what a person would see: no import error, the workload's functions in the
//! sandwich view's table, and those functions one after the other, in phases, along the
//! time-ordered flame chart (found by moving the mouse across it and reading its hover tooltip).
//!
//! Needs Node.js, Debian's `chromium` and `npm ci --prefix tests/viewer` (.ci/run does all
//! three); without one of them these tests fail and say what to install.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{hvprof, workspace_root, TempDir, REFGUEST_PASS};

/// The hand-written `perf script` text of tests/viewer/fixtures: one thread running f1 (40
/// samples), then f2 (25), then f4 (35), under main and _start, one sample a millisecond.
const WORKLOAD: &str = "tests/viewer/fixtures/workload.perf.txt";
/// The workload's functions in the order they run.
const ORDER: [&str; 3] = ["f1", "f2", "f4"];
/// The reference guest's phase functions as speedscope names hvprof's frames.
const PHASES: [&str; 3] = [
    "refguest!shares_f1",
    "refguest!shares_f2",
    "refguest!shares_f4",
];
/// The check's own limit is 60 s; past this the test kills it.
const LIMIT: Duration = Duration::from_secs(90);

/// What one run of tests/viewer/speedscope.mjs printed and how it ended.
pub(crate) struct Check {
    status: ExitStatus,
    elapsed: Duration,
    /// Its report: the versions, the page's text, the table, the chart's rows, the verdict.
    pub(crate) stdout: String,
    stderr: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "---- speedscope.mjs: {} after {:.2?}",
            self.status, self.elapsed
        )?;
        writeln!(f, "---- stdout:\n{}", self.stdout)?;
        write!(f, "---- stderr:\n{}", self.stderr)
    }
}

impl Check {
    /// Asserts that every check held.
    pub(crate) fn assert_shown(&self) -> &Check {
        assert!(
            self.status.success(),
            "speedscope does not show what it should\n{self}"
        );
        self
    }

    /// Asserts that the check failed (status 1, not a usage error) saying each of `reasons`.
    fn assert_failed_with(&self, reasons: &[&str]) -> &Check {
        assert_eq!(self.status.code(), Some(1), "the check fails\n{self}");
        for r in reasons {
            assert!(
                self.stdout
                    .lines()
                    .any(|l| l.starts_with("FAIL: ") && l.contains(r)),
                "a FAIL line says {r:?}\n{self}"
            );
        }
        self
    }

    /// Asserts that a line of the report contains `needle`.
    fn assert_says(&self, needle: &str) -> &Check {
        assert!(
            self.stdout.contains(needle),
            "the report says {needle:?}\n{self}"
        );
        self
    }
}

/// The Chromium to run: `HVPROF_TEST_CHROMIUM`, else Debian's `chromium` on PATH.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("HVPROF_TEST_CHROMIUM") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "no `chromium` on PATH: install Debian's chromium (apt-get install -y chromium) \
             or set HVPROF_TEST_CHROMIUM to a Chromium or Chrome binary"
        )
    })
}

/// Opens `profile` in speedscope and checks that it shows `order`'s functions in that order,
/// with screenshots kept in `HVPROF_TEST_VIEWER_SHOTS` when that names a directory.
pub(crate) fn speedscope(profile: &Path, order: &[&str]) -> Check {
    let dir = workspace_root().join("tests/viewer");
    let app = dir.join("node_modules/speedscope/dist/release/index.html");
    assert!(
        app.is_file(),
        "no speedscope app at {}: run `npm ci --prefix tests/viewer` (the npm package \
         speedscope, pinned by tests/viewer/package-lock.json; needs Debian's nodejs and npm)",
        app.display()
    );
    let chromium = chromium();
    let out = TempDir::new("viewer");
    let mut cmd = Command::new("node");
    cmd.arg(dir.join("speedscope.mjs"))
        .arg("--chromium")
        .arg(&chromium)
        .arg("--profile")
        .arg(profile)
        .arg("--order")
        .arg(order.join(","));
    if let Some(shots) = std::env::var_os("HVPROF_TEST_VIEWER_SHOTS") {
        cmd.arg("--shot").arg(shots);
    }
    let stdout = out.join("stdout");
    let stderr = out.join("stderr");
    let create = |p: &Path| File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    cmd.stdin(Stdio::null())
        .stdout(create(&stdout))
        .stderr(create(&stderr));
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        panic!("cannot run `node` ({e}): install Debian's nodejs (apt-get install -y nodejs npm)")
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for node") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "speedscope.mjs still running after {LIMIT:?}; killed it\n{}",
                std::fs::read_to_string(&stdout).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read =
        |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let check = Check {
        status,
        elapsed: started.elapsed(),
        stdout: read(&stdout),
        stderr: read(&stderr),
    };
    // What the page showed, for the log of a passing run too (`--no-capture`).
    eprintln!("{check}");
    check
}

#[test]
fn speedscope_shows_the_workload_in_time_order() {
    let check = speedscope(&workspace_root().join(WORKLOAD), &ORDER);
    check
        .assert_shown()
        .assert_says("ok: speedscope shows f1, f2, f4 in that order")
        // Read as what it is, and its header's command, pid and tid understood.
        .assert_says("Importing from linux perf script output")
        .assert_says("refguest pid: 1 tid: 1");
}

/// hvprof's own output: the reference guest's known phases (`scenario=phases`: f1, then f2,
/// then f4, with halts between) profiled with `hvprof profile --timeline`, written per vCPU by
/// `hvprof report --symbols ELF --perf-script FILE --per-vcpu`, show in speedscope in that
/// order. (The
/// per-thread timeline.perf.txt holds the phases as three guest processes, and speedscope opens
/// one thread at a time.)
#[test]
fn speedscope_shows_hvprofs_own_timeline_of_the_phases_in_order() {
    let dir = TempDir::new("viewer-hvprof");
    let run = dir.join("run");
    hvprof([
        "profile",
        "--kernel",
        env!("HVPROF_REFGUEST_ELF"),
        "--cmdline",
        "scenario=phases",
        "--interval",
        "10000",
        "--timeline",
        "--quiet",
        "--out",
        run.to_str().expect("a UTF-8 path"),
    ])
    .limit(Duration::from_secs(60))
    .run()
    .assert_debug_exit(REFGUEST_PASS);
    let perf = dir.join("vcpus.perf.txt");
    let profile = run.join("profile.json");
    hvprof([
        "report".as_ref(),
        profile.as_os_str(),
        "--symbols".as_ref(),
        env!("HVPROF_REFGUEST_ELF").as_ref(),
        "--perf-script".as_ref(),
        perf.as_os_str(),
        "--per-vcpu".as_ref(),
    ])
    .run()
    .assert_status(0);
    let text = std::fs::read_to_string(&perf).expect("the perf script text");
    assert!(
        text.lines()
            .filter(|l| !l.starts_with('\t') && !l.is_empty())
            .all(|l| l.starts_with("vcpu0 0/0 [000] ")),
        "one track, vCPU 0's"
    );
    speedscope(&perf, &PHASES)
        .assert_shown()
        .assert_says("ok: speedscope shows refguest!shares_f1, refguest!shares_f2, refguest!shares_f4 in that order")
        // The one profile, named by its comm (speedscope leaves out a pid and tid of 0).
        .assert_says("Sandwich vcpu0");
}

/// The check can fail: a workload whose f2 is named f3 and whose f4 phase has 10 ms of f1 in
/// its middle, looked for as f1, f2, f4, f3: f2 is missing, f1 overlaps f4, f3 comes before f4.
#[test]
fn speedscope_check_fails_on_wrong_functions_and_order() {
    let text = std::fs::read_to_string(workspace_root().join(WORKLOAD)).expect("the fixture");
    let samples: Vec<String> = text
        .split("\n\n")
        .enumerate()
        .map(|(i, sample)| {
            // Samples 0-39 are f1, 40-64 f2, 65-99 f4.
            let sample = sample.replace(" f2+", " f3+");
            if (80..90).contains(&i) {
                assert!(sample.contains(" f4+"), "sample {i} is f4's: {sample}");
                sample.replace(" f4+", " f1+")
            } else {
                sample
            }
        })
        .collect();
    let dir = TempDir::new("viewer-wrong");
    let profile = dir.write("timeline.perf.txt", samples.join("\n\n").as_bytes());
    speedscope(&profile, &["f1", "f2", "f4", "f3"]).assert_failed_with(&[
        "the sandwich table lacks f2",
        "the time-ordered chart shows no f2",
        "the time-ordered chart shows f1 until x=",
        "the time-ordered chart shows f3 from x=",
    ]);
}

/// The check fails when speedscope cannot import the file (it says so with an alert).
#[test]
fn speedscope_check_fails_on_an_import_error() {
    let dir = TempDir::new("viewer-garbage");
    let profile = dir.write("timeline.perf.txt", b"this is no profile\n{[\n");
    speedscope(&profile, &ORDER)
        .assert_failed_with(&["speedscope did not show the profile", "Unrecognized format"]);
}
