//! The fault-injection suite: hvprof under the faults a fleet host meets and the input a hostile
//! user or guest can hand it. Each test checks that nothing written before is lost, that
//! nothing hangs past its bound, and that the exit status is the documented one
//! (docs/architecture.md, "Guarantees").

/// The control API: slow and idle clients, stale socket files.
mod api;
/// Disk and kernel images: corrupt qcow2 headers, truncated bzImages.
mod images;
/// Inputs: FIFOs, devices, directories, oversized files; signals before any input is opened.
mod inputs;
/// Error lines that say each cause once.
pub(crate) mod messages;
/// Outputs: full file systems, kills during the write, symlinks, unwritable `--out`.
mod outputs;
/// Standard output into a pipe whose reader went away: no panic, no file lost.
mod pipes;
/// Saved profiles and compare/merge arguments: inconsistent counts, non-finite thresholds,
/// control characters in text that reaches XML, JSON, Markdown and the terminal.
mod profiles;
/// What stands at an output's path (devices, FIFOs, an input of the same command), what an
/// earlier run left beside it, and inputs refused from their first bytes.
mod targets;
/// Saved runs with a timeline: the window's object, bounded reading and export sizes, bidi
/// characters, duplicate keys (issue 40).
mod timelines;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The reference guest's 1:2:4 workload, briefly.
pub const WORKLOAD: &str = "scenario=shares shares.ms=300";

/// A generous bound on a short profiled run that only proves "does not hang".
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// `hvprof profile` of the built-in guest with `cmdline` into `dir/name`, plus `extra`
/// options (`--timeline`); returns its profile.json. The workload checks its own 1:2:4
/// shares and says so in its status (1 when a loaded host skews a run this short); either
/// way the profile is written.
pub fn saved_run(dir: &Path, name: &str, cmdline: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let mut args = vec![
        "profile",
        "--cmdline",
        cmdline,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        "--serial",
        "null",
    ];
    args.extend_from_slice(extra);
    let run = crate::harness::hvprof(args).limit(RUN_LIMIT).run();
    assert!(matches!(run.code(), Some(0 | 1)), "{run}");
    let path = out.join("profile.json");
    assert!(path.exists(), "{run}");
    path
}
