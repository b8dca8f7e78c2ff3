//! Scratch directories and file nodes of the crate's own tests (never the system's).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A fresh directory under the system's temporary directory, removed when dropped.
pub struct TestDir(PathBuf);

impl TestDir {
    /// A new, empty directory whose name says which test made it.
    pub fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("hvprof-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TestDir(d)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    let c = c_path(path);
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Makes a character device of the null device's numbers (1, 3) at `path`, the test's own
/// node: None where this user may not (not root).
pub fn mknod_null(path: &Path) -> Option<PathBuf> {
    let c = c_path(path);
    // SAFETY: `c` is a valid NUL-terminated path; mknod creates a node and touches nothing
    // else.
    let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    (r == 0).then(|| path.to_path_buf())
}
