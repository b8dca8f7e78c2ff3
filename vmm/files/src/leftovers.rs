//! Temporaries left behind by an hvprof that was killed while it wrote ([`crate::atomic`]
//! names them `.NAME.PID.N.part`): removed at the next write into their directory, once the
//! process that made them is gone. A temporary of a live process (another hvprof writing
//! there now) is left alone, and nothing that is not a regular file of that exact naming is
//! ever touched.

use std::ffi::OsStr;
use std::path::Path;

/// The suffix of every temporary [`crate::atomic`] creates.
pub const TEMP_SUFFIX: &str = ".part";

/// The name of temporary number `n` of this process for a file named `name`:
/// `.NAME.PID.N.part`, never a name a reader takes for a result.
pub fn temp_name(name: &str, n: u32) -> String {
    format!(".{name}.{}.{n}{TEMP_SUFFIX}", std::process::id())
}

/// The process id in a temporary's name `.NAME.PID.N.part`, if `name` is one.
pub(crate) fn temp_owner(name: &OsStr) -> Option<i32> {
    let name = name.to_str()?;
    let rest = name.strip_prefix('.')?.strip_suffix(TEMP_SUFFIX)?;
    let mut parts = rest.rsplitn(3, '.');
    let n = parts.next()?;
    let pid = parts.next()?;
    let stem = parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if stem.is_empty() || !digits(n) || !digits(pid) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Whether process `pid` exists (a zombie or another user's process counts), by its entry
/// in /proc (no system call beyond a file system look-up, which every thread's system-call
/// filter allows). None where /proc is not mounted: then no process is known dead.
fn alive(pid: i32) -> Option<bool> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    Some(proc.join(pid.to_string()).exists())
}

/// The most directory entries looked at for leftovers in one write: a huge directory costs
/// a bounded time, and what is not reached is removed by later writes.
const MAX_ENTRIES: usize = 100_000;

/// Removes the temporaries of dead processes in `dir`. Failures are ignored: leftovers are
/// untidy, never wrong (no reader takes a `.part` file for a result). Returns how many were
/// removed.
pub fn remove_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let mut removed = 0;
    for entry in entries.take(MAX_ENTRIES).flatten() {
        let Some(pid) = temp_owner(&entry.file_name()) else {
            continue;
        };
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if !is_file || pid == me || alive(pid) != Some(false) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn only_temporaries_of_this_naming_are_recognized() {
        let mine = i32::try_from(std::process::id()).unwrap();
        assert_eq!(
            temp_owner(OsStr::new(&temp_name("profile.json", 7))),
            Some(mine)
        );
        assert_eq!(
            temp_owner(OsStr::new(".profile.json.123.4.part")),
            Some(123)
        );
        assert_eq!(temp_owner(OsStr::new(".a.b.c.77.0.part")), Some(77));
        for name in [
            "profile.json.123.4.part",
            ".profile.json.123.4.partial",
            "..123.4.part",
            ".x.12a.4.part",
            ".x.123.part",
            ".x.0.1.part",
            ".part",
        ] {
            assert_eq!(temp_owner(OsStr::new(name)), None, "{name}");
        }
    }

    #[test]
    fn a_dead_process_temporaries_go_and_everything_else_stays() {
        let d = TestDir::new("leftovers");
        // A child that has been reaped: its pid names no process (until reused, which a
        // test cannot rule out, so only what stays is asserted unconditionally).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mine = std::process::id();
        let names = [
            format!(".profile.json.{dead}.0.part"),
            format!(".report.txt.{mine}.3.part"),
            "keep.part".to_string(),
            "profile.json".to_string(),
        ];
        for n in &names {
            std::fs::write(d.path().join(n), b"x").unwrap();
        }
        std::fs::create_dir(d.path().join(format!(".dir.{dead}.1.part"))).unwrap();
        let removed = remove_in(d.path());
        assert!(removed <= 1);
        for n in &names[1..] {
            assert!(d.path().join(n).exists(), "{n}");
        }
        assert!(d.path().join(format!(".dir.{dead}.1.part")).is_dir());
        if alive(i32::try_from(dead).unwrap()) == Some(false) {
            assert_eq!(removed, 1);
            assert!(!d.path().join(&names[0]).exists());
        }
    }
}
