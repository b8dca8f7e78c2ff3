//! Every file hvprof writes goes through here, so that a reader finds either the complete old
//! file or the complete new one, never half of either: a full file system, an I/O error or a
//! SIGKILL during the write leaves the previous file byte-identical.
//!
//! A file is written to a temporary beside it (same directory, so on the same file system),
//! created with `O_CREAT | O_EXCL | O_NOFOLLOW` under a name that is obviously temporary
//! (`.NAME.PID.N.part`, never the final name), flushed and fsynced; then renamed over the final
//! name and the directory fsynced. On any error the temporary is removed and the error names
//! the final file. A final path is never opened for writing: a symlink planted at it is
//! replaced by the rename, its target never touched. Several files that belong together (a
//! profile's four files) are all [staged](stage) before any is [committed](commit_all), so a
//! failure while writing any of them leaves every old one in place.
//!
//! What is already at the final name decides whether it is replaced at all
//! ([`crate::target`]): a device or a FIFO with a reader is written through, as a shell's
//! `>` writes it, and a directory, a socket or a FIFO nobody reads is refused, never
//! replaced by a regular file.
//!
//! [`check_dir`] and [`check_file`] prove before any work that a directory takes new files
//! and that a file can be written, so that a bad `--out` costs nothing. Temporaries that a
//! killed hvprof left in a directory are removed at the next write there
//! ([`crate::leftovers`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub use crate::target::Naming;
use crate::target::{Target, TargetError};

/// Why a file could not be written, or a directory cannot take new files.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Writing this file failed; the file is as it was.
    #[error("cannot write {}", .0.display())]
    File(PathBuf, #[source] std::io::Error),
    /// Files cannot be created in this directory.
    #[error("cannot write files into {}", .0.display())]
    Dir(PathBuf, #[source] std::io::Error),
    /// Something is at the path that an output never replaces (the user's to mend).
    #[error(transparent)]
    Refused(TargetError),
}

impl From<TargetError> for WriteError {
    fn from(e: TargetError) -> Self {
        match e {
            TargetError::Open(p, e) => WriteError::File(p, e),
            refused => WriteError::Refused(refused),
        }
    }
}

impl WriteError {
    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            WriteError::File(p, _) | WriteError::Dir(p, _) => p,
            WriteError::Refused(TargetError::Refused { path, .. }) => path,
            WriteError::Refused(TargetError::Open(p, _)) => p,
        }
    }

    /// Whether the user can mend this by naming another output (something is at the path
    /// that is never replaced), rather than the host failing (a full file system).
    pub fn is_refusal(&self) -> bool {
        matches!(self, WriteError::Refused(_))
    }

    /// The I/O error underneath.
    pub fn into_io(self) -> std::io::Error {
        match self {
            WriteError::File(_, e) | WriteError::Dir(_, e) => e,
            WriteError::Refused(e) => std::io::Error::other(e),
        }
    }
}

pub use crate::leftovers::TEMP_SUFFIX;

/// The directory `target` goes in (`.` for a bare file name).
fn parent_of(target: &Path) -> &Path {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Numbers the temporaries of this process.
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A new, empty temporary beside `target`, opened with `O_EXCL | O_NOFOLLOW`: it never opens
/// an existing file or follows a symlink, whatever is planted in the directory.
fn create_temp(target: &Path) -> std::io::Result<(File, PathBuf)> {
    let dir = parent_of(target);
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(crate::leftovers::temp_name(&name, n));
        let opened = File::options()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o644)
            .open(&tmp);
        match opened {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A complete, fsynced temporary that becomes `target` when committed. Dropped uncommitted,
/// the temporary is removed and `target` is left as it was. An output written through (a
/// device, a FIFO with a reader) has no temporary: it was written when staged.
#[derive(Debug)]
pub struct Staged {
    temp: Option<PathBuf>,
    target: PathBuf,
    committed: bool,
}

impl Staged {
    /// The temporary's path (to check what was written before committing it); None for an
    /// output written through.
    pub fn temp_path(&self) -> Option<&Path> {
        self.temp.as_deref()
    }

    /// The final path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Renames the temporary over the final name and fsyncs the directory.
    pub fn commit(self) -> Result<PathBuf, WriteError> {
        let mut done = commit_all(vec![self])?;
        Ok(done.remove(0))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let (false, Some(temp)) = (self.committed, &self.temp) {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// Writes a temporary for `target` with `write`, flushes and fsyncs it; `naming` says who
/// chose the name ([`Naming`]). `target` is not touched, unless it is a device or a FIFO
/// with a reader, which is written through now ([`crate::target`]). The directory must
/// exist. On error nothing is left behind.
pub fn stage<E: From<WriteError>>(
    target: &Path,
    naming: Naming,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<Staged, E> {
    let io = |e| WriteError::File(target.to_path_buf(), e);
    let through = crate::target::classify(target, naming).map_err(WriteError::from)?;
    let (file, temp) = match through {
        Target::Through => (
            crate::target::open_through(target).map_err(WriteError::from)?,
            None,
        ),
        Target::Replace => {
            let (file, temp) = create_temp(target).map_err(io)?;
            (file, Some(temp))
        }
    };
    let staged = Staged {
        temp,
        target: target.to_path_buf(),
        committed: false,
    };
    let mut w = BufWriter::new(file);
    write(&mut w)?;
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    if staged.temp.is_some() {
        file.sync_all().map_err(io)?;
    }
    Ok(staged)
}

/// Renames every staged temporary over its final name, then fsyncs each directory once. The
/// renames come only after every file was written; a rename that fails (rare: the writes are
/// what need space) leaves its own file and the ones after it untouched and removes their
/// temporaries.
pub fn commit_all(staged: Vec<Staged>) -> Result<Vec<PathBuf>, WriteError> {
    let mut done = Vec::with_capacity(staged.len());
    let mut dirs: Vec<PathBuf> = Vec::new();
    for mut s in staged {
        let Some(temp) = &s.temp else {
            s.committed = true;
            done.push(s.target.clone());
            continue;
        };
        std::fs::rename(temp, &s.target).map_err(|e| WriteError::File(s.target.clone(), e))?;
        s.committed = true;
        let dir = parent_of(&s.target).to_path_buf();
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
        done.push(s.target.clone());
    }
    for dir in dirs {
        // The rename is durable once the directory is: without this a crash could bring back
        // the old file (never a partial one).
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| WriteError::Dir(dir.clone(), e))?;
        crate::leftovers::remove_in(&dir);
    }
    Ok(done)
}

/// Writes `target` atomically with `write` (see the module documentation).
pub fn write_with(
    target: &Path,
    naming: Naming,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<PathBuf, WriteError> {
    stage(target, naming, |w| {
        write(w).map_err(|e| WriteError::File(target.to_path_buf(), e))
    })?
    .commit()
}

/// Writes `bytes` to `target` atomically.
pub fn write(target: &Path, naming: Naming, bytes: &[u8]) -> Result<PathBuf, WriteError> {
    write_with(target, naming, |w| w.write_all(bytes))
}

/// Proves that `dir` takes new files: creates it (and its parents) when `create`, then creates
/// and removes a temporary in it. Errors name `dir`.
pub fn check_dir(dir: &Path, create: bool) -> Result<(), WriteError> {
    let fail = |e| WriteError::Dir(dir.to_path_buf(), e);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(fail(std::io::Error::from(
                std::io::ErrorKind::NotADirectory,
            )))
        }
        Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        Err(e) => return Err(fail(e)),
    }
    let (_, temp) = create_temp(&dir.join("probe")).map_err(fail)?;
    std::fs::remove_file(&temp).map_err(fail)
}

/// Proves that the file `target`, named by the user, can be written: its directory exists
/// and takes new files, and nothing is at `target` that an output never replaces (a
/// directory, a socket: [`crate::target`]). A device is opened, without blocking, to prove
/// it takes output, and closed again; a FIFO's reader is checked when it is written
/// ([`crate::target::check_through`]). Errors name `target`.
pub fn check_file(target: &Path) -> Result<(), WriteError> {
    let fail = |e| WriteError::File(target.to_path_buf(), e);
    match crate::target::classify(target, Naming::Named)? {
        Target::Through => crate::target::check_through(target).map_err(Into::into),
        Target::Replace => check_dir(parent_of(target), false).map_err(|e| fail(e.into_io())),
    }
}

/// Proves that `names` can be written in `dir` (see [`check_dir`]): nothing is at any of
/// them that an output never replaces ([`crate::target`], as hvprof-chosen names).
pub fn check_names(dir: &Path, names: &[&str]) -> Result<(), WriteError> {
    check_dir(dir, true)?;
    for name in names {
        let path = dir.join(name);
        if crate::target::classify(&path, Naming::InDir)? == Target::Through {
            crate::target::check_through(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hvprof-atomic-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn io_err(e: std::io::Error) -> WriteError {
        WriteError::File(PathBuf::from("test"), e)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn write_replaces_the_file_and_leaves_no_temporary() {
        let d = temp_dir("replace");
        let f = d.join("report.txt");
        std::fs::write(&f, b"old").unwrap();
        assert_eq!(write(&f, Naming::InDir, b"new contents").unwrap(), f);
        assert_eq!(std::fs::read(&f).unwrap(), b"new contents");
        assert_eq!(names(&d), ["report.txt"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_the_temporary() {
        let d = temp_dir("failed");
        let f = d.join("profile.json");
        std::fs::write(&f, b"old").unwrap();
        let e = write_with(&f, Naming::InDir, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk on fire"))
        })
        .unwrap_err();
        assert_eq!(e.path(), f);
        assert!(e.to_string().contains("profile.json"), "{e}");
        assert_eq!(std::fs::read(&f).unwrap(), b"old");
        assert_eq!(names(&d), ["profile.json"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_planted_symlink_is_replaced_and_its_target_untouched() {
        let d = temp_dir("symlink");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let f = d.join("report.txt");
        symlink(&victim, &f).unwrap();
        write(&f, Naming::InDir, b"report").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let meta = std::fs::symlink_metadata(&f).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(std::fs::read(&f).unwrap(), b"report");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_temporary_never_follows_a_symlink_planted_at_its_name() {
        let d = temp_dir("nofollow");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        // Every name the next temporaries could take is a symlink: creation skips them.
        let next = COUNTER.load(Ordering::Relaxed);
        for n in next..next + 64 {
            let name = format!(".out.{}.{n}{TEMP_SUFFIX}", std::process::id());
            symlink(&victim, d.join(name)).unwrap();
        }
        let f = d.join("out");
        write(&f, Naming::InDir, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn staged_files_change_nothing_until_committed() {
        let d = temp_dir("staged");
        let (a, b) = (d.join("a"), d.join("b"));
        std::fs::write(&a, b"old a").unwrap();
        std::fs::write(&b, b"old b").unwrap();
        let sa = stage(&a, Naming::InDir, |w| w.write_all(b"new a").map_err(io_err)).unwrap();
        let sb: Result<Staged, WriteError> = stage(&b, Naming::InDir, |_| {
            Err(io_err(std::io::Error::other("no space")))
        });
        assert!(sb.is_err());
        drop(sa);
        assert_eq!(std::fs::read(&a).unwrap(), b"old a");
        assert_eq!(std::fs::read(&b).unwrap(), b"old b");
        assert_eq!(names(&d), ["a", "b"]);
        let sa = stage(&a, Naming::InDir, |w| w.write_all(b"new a").map_err(io_err)).unwrap();
        let temp = sa
            .temp_path()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy();
        assert!(
            temp.starts_with(".a.") && temp.ends_with(TEMP_SUFFIX),
            "{temp}"
        );
        assert_eq!(sa.temp_path().unwrap().parent(), Some(d.as_path()));
        let sb = stage(&b, Naming::InDir, |w| w.write_all(b"new b").map_err(io_err)).unwrap();
        commit_all(vec![sa, sb]).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"new a");
        assert_eq!(std::fs::read(&b).unwrap(), b"new b");
        assert_eq!(names(&d), ["a", "b"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn checks_name_the_path_and_refuse_files_where_directories_go() {
        let d = temp_dir("check");
        let file = d.join("file");
        std::fs::write(&file, b"x").unwrap();
        check_dir(&d, false).unwrap();
        check_dir(&d.join("new/sub"), true).unwrap();
        assert!(d.join("new/sub").is_dir());
        assert_eq!(names(&d.join("new/sub")), Vec::<String>::new());
        let e = check_dir(&file, false).unwrap_err();
        assert_eq!(e.path(), file);
        let e = check_dir(&file.join("sub"), true).unwrap_err();
        assert_eq!(e.path(), file.join("sub"));
        let e = check_file(&file.join("x.json")).unwrap_err();
        assert_eq!(e.path(), file.join("x.json"));
        let e = check_file(&d).unwrap_err();
        assert!(e.is_refusal(), "{e:?}");
        assert_eq!(e.path(), d);
        check_file(&file).unwrap();
        check_file(&d.join("absent.json")).unwrap();
        assert!(!d.join("absent.json").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_device_is_written_through_and_stays_a_device() {
        let d = crate::testdir::TestDir::new("through-device");
        let Some(null) = crate::testdir::mknod_null(&d.path().join("null")) else {
            return; // not root: no node of its own to test with
        };
        check_file(&null).unwrap();
        write(&null, Naming::Named, b"discarded").unwrap();
        check_names(d.path(), &["null"]).unwrap();
        write(&null, Naming::InDir, b"discarded").unwrap();
        let meta = std::fs::symlink_metadata(&null).unwrap();
        assert!(
            std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()),
            "{meta:?}"
        );
        assert_eq!(names(d.path()), ["null"]);
    }

    #[test]
    fn a_fifo_is_written_through_to_its_reader_and_refused_without_one() {
        use std::io::Read;
        let d = crate::testdir::TestDir::new("through-fifo");
        let fifo = d.path().join("out.xml");
        crate::testdir::mkfifo(&fifo);
        // The check leaves a FIFO alone; the write finds that nobody reads it.
        check_file(&fifo).unwrap();
        let e = write(&fifo, Naming::Named, b"x").unwrap_err();
        assert!(e.to_string().contains("a FIFO nobody reads"), "{e}");
        assert!(e.is_refusal(), "{e:?}");
        // A reader, opened without blocking before the writer comes.
        let mut reader = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        write(&fifo, Naming::Named, b"<testsuite/>").unwrap();
        let mut got = String::new();
        reader.read_to_string(&mut got).unwrap();
        assert_eq!(got, "<testsuite/>");
        assert_eq!(names(d.path()), ["out.xml"]);
    }

    #[test]
    fn directories_are_refused_as_outputs_by_name_or_in_a_directory() {
        let d = crate::testdir::TestDir::new("refuse-dir");
        std::fs::create_dir(d.path().join("report.txt")).unwrap();
        let e = check_names(d.path(), &["profile.json", "report.txt"]).unwrap_err();
        assert!(e.is_refusal(), "{e:?}");
        assert_eq!(e.path(), d.path().join("report.txt"));
        let e = write(&d.path().join("report.txt"), Naming::InDir, b"x").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }

    #[test]
    fn a_killed_writers_temporaries_are_removed_at_the_next_write() {
        let d = crate::testdir::TestDir::new("leftover-commit");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let left = d
            .path()
            .join(format!(".profile.json.{dead}.0{TEMP_SUFFIX}"));
        std::fs::write(&left, b"half").unwrap();
        write(&d.path().join("profile.json"), Naming::InDir, b"{}").unwrap();
        // Unless the pid was reused at once, the leftover is gone.
        // SAFETY: signal 0 sends nothing.
        if unsafe { libc::kill(i32::try_from(dead).unwrap(), 0) } != 0 {
            assert_eq!(names(d.path()), ["profile.json"]);
        }
    }
}
