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
//! [`check_dir`] proves before any work that a directory takes new files, so that a bad
//! `--out` costs nothing.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a file could not be written, or a directory cannot take new files.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Writing this file failed; the file is as it was.
    #[error("cannot write {}", .0.display())]
    File(PathBuf, #[source] std::io::Error),
    /// Files cannot be created in this directory.
    #[error("cannot write files into {}", .0.display())]
    Dir(PathBuf, #[source] std::io::Error),
}

impl WriteError {
    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            WriteError::File(p, _) | WriteError::Dir(p, _) => p,
        }
    }

    /// The I/O error underneath.
    pub fn into_io(self) -> std::io::Error {
        match self {
            WriteError::File(_, e) | WriteError::Dir(_, e) => e,
        }
    }
}

/// The suffix of every temporary this module creates.
pub const TEMP_SUFFIX: &str = ".part";

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
        let tmp = dir.join(format!(".{name}.{}.{n}{TEMP_SUFFIX}", std::process::id()));
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
/// the temporary is removed and `target` is left as it was.
#[derive(Debug)]
pub struct Staged {
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staged {
    /// The temporary's path (to check what was written before committing it).
    pub fn temp_path(&self) -> &Path {
        &self.temp
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
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Writes a temporary for `target` with `write`, flushes and fsyncs it. `target` is not
/// touched. The directory must exist. On error nothing is left behind.
pub fn stage<E: From<std::io::Error>>(
    target: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<Staged, E> {
    let (file, temp) = create_temp(target)?;
    let staged = Staged {
        temp,
        target: target.to_path_buf(),
        committed: false,
    };
    let mut w = BufWriter::new(file);
    write(&mut w)?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
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
        std::fs::rename(&s.temp, &s.target).map_err(|e| WriteError::File(s.target.clone(), e))?;
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
    }
    Ok(done)
}

/// Writes `target` atomically with `write` (see the module documentation).
pub fn write_with(
    target: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<PathBuf, WriteError> {
    stage(target, write)
        .map_err(|e| WriteError::File(target.to_path_buf(), e))?
        .commit()
}

/// Writes `bytes` to `target` atomically.
pub fn write(target: &Path, bytes: &[u8]) -> Result<PathBuf, WriteError> {
    write_with(target, |w| w.write_all(bytes))
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

/// Proves that the file `target` can be written: its directory exists and takes new files,
/// and `target` is not a directory. Errors name `target`.
pub fn check_file(target: &Path) -> Result<(), WriteError> {
    let fail = |e| WriteError::File(target.to_path_buf(), e);
    if target.is_dir() {
        return Err(fail(std::io::Error::from(std::io::ErrorKind::IsADirectory)));
    }
    check_dir(parent_of(target), false).map_err(|e| fail(e.into_io()))
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
        assert_eq!(write(&f, b"new contents").unwrap(), f);
        assert_eq!(std::fs::read(&f).unwrap(), b"new contents");
        assert_eq!(names(&d), ["report.txt"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_the_temporary() {
        let d = temp_dir("failed");
        let f = d.join("profile.json");
        std::fs::write(&f, b"old").unwrap();
        let e = write_with(&f, |w| {
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
        write(&f, b"report").unwrap();
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
        write(&f, b"new").unwrap();
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
        let sa = stage(&a, |w| w.write_all(b"new a")).unwrap();
        let sb: Result<Staged, std::io::Error> =
            stage(&b, |_| Err(std::io::Error::other("no space")));
        assert!(sb.is_err());
        drop(sa);
        assert_eq!(std::fs::read(&a).unwrap(), b"old a");
        assert_eq!(std::fs::read(&b).unwrap(), b"old b");
        assert_eq!(names(&d), ["a", "b"]);
        let sa = stage(&a, |w| w.write_all(b"new a")).unwrap();
        let temp = sa.temp_path().file_name().unwrap().to_string_lossy();
        assert!(
            temp.starts_with(".a.") && temp.ends_with(TEMP_SUFFIX),
            "{temp}"
        );
        assert_eq!(sa.temp_path().parent(), Some(d.as_path()));
        let sb = stage(&b, |w| w.write_all(b"new b")).unwrap();
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
        assert!(matches!(e, WriteError::File(..)), "{e:?}");
        check_file(&file).unwrap();
        check_file(&d.join("absent.json")).unwrap();
        assert!(!d.join("absent.json").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
