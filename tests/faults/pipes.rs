//! Standard output read by a pipe whose reader goes away (issue 40, item 10): `hvprof report P
//! --timeline | head -1` exited 101 with a backtrace, because `print!` panics on EPIPE. Every
//! subcommand now ends quietly (status 0, or its own status, or death by SIGPIPE as Unix
//! filters die), never with a panic, and the files it was asked to write are written.
//!
//! The pipe is closed either after one line was read, for an output too large for the pipe to
//! hold (the test checks it is), or before hvprof starts, for a short one: either way hvprof's
//! write meets EPIPE every time, so the tests cannot pass by luck.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{hvprof, hvprof_bin, Output, TempDir};

/// A generous bound that only proves "does not hang".
const LIMIT: Duration = Duration::from_secs(120);

/// How hvprof ended, its stdout a pipe whose reader went away.
struct Ended {
    args: Vec<String>,
    status: ExitStatus,
    /// What the test read before it closed the pipe.
    read: String,
    stderr: String,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "---- hvprof {}", self.args.join(" "))?;
        writeln!(f, "---- exit: {}", self.status)?;
        writeln!(f, "---- read from stdout:\n{}", self.read)?;
        write!(f, "---- stderr:\n{}\n---- end", self.stderr)
    }
}

impl Ended {
    /// Status 0 or death by SIGPIPE (what `hvprof ... | head -1` may see); no panic.
    fn assert_quiet(&self) -> &Ended {
        self.assert_no_panic();
        let sigpipe = self.status.signal() == Some(libc::SIGPIPE);
        assert!(
            self.status.code() == Some(0) || sigpipe,
            "expected status 0 or death by SIGPIPE\n{self}"
        );
        self
    }

    fn assert_no_panic(&self) -> &Ended {
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("backtrace"),
            "hvprof panicked\n{self}"
        );
        assert_ne!(self.status.code(), Some(101), "{self}");
        self
    }
}

/// Runs hvprof with `args`, its stdout a pipe: with `line` the test reads one line from it
/// and closes it (and returns how many bytes the pipe holds); without, the pipe's reader is
/// closed before hvprof starts.
fn with_reader_gone(args: &[&str], line: bool) -> (Ended, usize) {
    let mut cmd = Command::new(hvprof_bin());
    cmd.args(args)
        .env_remove("_NT_SYMBOL_PATH")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let mut read = Vec::new();
    let mut capacity = 0;
    let mut child = if line {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("starting hvprof");
        let mut out = child.stdout.take().expect("piped stdout");
        // SAFETY: fcntl(F_GETPIPE_SZ) takes no pointer; the descriptor is the pipe's read
        // end, open while `out` lives.
        let size = unsafe { libc::fcntl(out.as_raw_fd(), libc::F_GETPIPE_SZ) };
        capacity = usize::try_from(size).expect("F_GETPIPE_SZ on a pipe");
        // Byte by byte: nothing past the first line is taken out of the pipe.
        let mut byte = [0u8; 1];
        while out.read(&mut byte).expect("reading hvprof's stdout") == 1 {
            read.push(byte[0]);
            if byte[0] == b'\n' {
                break;
            }
        }
        drop(out);
        child
    } else {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        cmd.stdout(writer).spawn().expect("starting hvprof")
    };
    let stderr = child.stderr.take().expect("piped stderr");
    let pump = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = { stderr }.read_to_string(&mut text);
        text
    });
    let status = wait_within(&mut child, args);
    let ended = Ended {
        args: args.iter().map(|a| a.to_string()).collect(),
        status,
        read: String::from_utf8_lossy(&read).into_owned(),
        stderr: pump.join().expect("the stderr reader"),
    };
    (ended, capacity)
}

fn wait_within(child: &mut Child, args: &[&str]) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for hvprof") {
            return status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hvprof {} still running after {LIMIT:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A saved profile with a timeline: `hvprof profile --timeline` of the reference guest's
/// short workload, run with its stdout already closed (the profile must still be written).
fn timeline_profile(dir: &TempDir) -> (PathBuf, Ended) {
    let out = dir.join("run");
    let (ended, _) = with_reader_gone(
        &[
            "profile",
            "--timeline",
            "--cmdline",
            "scenario=shares shares.ms=300",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
            "--serial",
            "null",
        ],
        false,
    );
    (out.join("profile.json"), ended)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 scratch path")
}

#[test]
fn profile_printing_into_a_closed_pipe_panicked_before_writing_its_profile() {
    let dir = TempDir::new("pipes");
    let (profile, ended) = timeline_profile(&dir);
    ended.assert_no_panic();
    // The workload checks its own 1:2:4 shares and says so in its status (1 when a loaded
    // host skews a run this short); either way the profile is written.
    assert!(matches!(ended.status.code(), Some(0 | 1)), "{ended}");
    assert!(profile.is_file(), "no profile.json\n{ended}");
}

#[test]
fn report_timeline_piped_into_head_panicked_with_status_101() {
    let dir = TempDir::new("pipes");
    let (profile, made) = timeline_profile(&dir);
    assert!(profile.is_file(), "{made}");
    let args = ["report", path(&profile), "--timeline", "--bin", "1e-9"];
    // The whole output, read to its end, is far more than a pipe holds: the closed pipe is
    // certainly written to after the first line.
    let whole: Output = hvprof(args).limit(LIMIT).run();
    whole.assert_status(0);
    let (ended, capacity) = with_reader_gone(&args, true);
    ended.assert_quiet();
    assert!(
        whole.stdout.len() > ended.read.len() + capacity,
        "the output ({} bytes) fits the pipe ({capacity} bytes): the test proves nothing",
        whole.stdout.len()
    );
    assert_eq!(
        ended.read,
        whole
            .stdout
            .lines()
            .next()
            .map(|l| format!("{l}\n"))
            .unwrap_or_default(),
        "{ended}"
    );
}

#[test]
fn compare_into_a_closed_pipe_panicked_before_writing_its_markdown() {
    let dir = TempDir::new("pipes");
    let (profile, made) = timeline_profile(&dir);
    assert!(profile.is_file(), "{made}");
    let markdown = dir.join("compare.md");
    let (ended, _) = with_reader_gone(
        &[
            "compare",
            path(&profile),
            path(&profile),
            "--markdown",
            path(&markdown),
        ],
        false,
    );
    // A profile compared with itself has no regression: status 0.
    ended.assert_quiet();
    let md = std::fs::read_to_string(&markdown).unwrap_or_default();
    assert!(md.contains("vs"), "--markdown not written\n{ended}");
}

#[test]
fn events_into_a_closed_pipe_panicked() {
    let (ended, _) = with_reader_gone(&["events"], false);
    ended.assert_quiet();
    let (ended, _) = with_reader_gone(&["events", "--json"], false);
    ended.assert_quiet();
}

/// Runs hvprof with `args`, its stdout and stderr both pipes whose reader went away before
/// it started (`hvprof ... 2>&1 | head -0`): nothing it prints can reach anyone.
fn with_both_readers_gone(args: &[&str]) -> ExitStatus {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let err = writer.try_clone().expect("a second end of the pipe");
    let mut child = Command::new(hvprof_bin())
        .args(args)
        .env_remove("_NT_SYMBOL_PATH")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(err)
        .spawn()
        .expect("starting hvprof");
    wait_within(&mut child, args)
}

#[test]
fn report_with_stderr_into_a_closed_pipe_panicked_after_writing() {
    let dir = TempDir::new("pipes");
    let (profile, made) = timeline_profile(&dir);
    assert!(profile.is_file(), "{made}");
    let perf = dir.join("perf.txt");
    // "hvprof: wrote FILE" goes to the closed stderr; the timeline table to the closed stdout.
    let args = [
        "report",
        path(&profile),
        "--perf-script",
        path(&perf),
        "--timeline",
    ];
    let status = with_both_readers_gone(&args);
    assert_eq!(
        status.code(),
        Some(0),
        "hvprof {}: {status}",
        args.join(" ")
    );
    assert!(perf.is_file(), "--perf-script not written");
    // An error message into a closed stderr: the command's own status, no panic.
    let status = with_both_readers_gone(&["report", path(&dir.join("absent.json"))]);
    assert_eq!(status.code(), Some(2), "{status}");
}
