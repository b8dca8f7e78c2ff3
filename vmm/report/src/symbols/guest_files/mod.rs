//! A Linux guest's files, found on the host by the paths the guest's kernel gives them: in the
//! initramfs hvprof booted ([`initrd`]), in sysroots (`--sysroot DIR`, the guest's root
//! tree, as perf's `--symfs`) and in disk images' ext2/3/4 file systems ([`image`]). The
//! files mapped by a guest's processes are read from here for their symbols.
//!
//! A sysroot's symbolic links are followed inside the sysroot: an absolute target means the
//! sysroot's root, never the host's, and `..` stops at that root.

pub mod image;
pub mod initrd;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use image::{ImagePlace, Opener};
pub use initrd::{Initrd, InitrdError};

/// Where a file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// In the initramfs at this host path.
    Initrd(PathBuf),
    /// This file on the host, under a sysroot.
    Host(PathBuf),
    /// In the file system of the disk image at this host path.
    Image(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Initrd(p) => write!(f, "the initramfs {}", p.display()),
            Origin::Host(p) => write!(f, "{}", p.display()),
            Origin::Image(p) => write!(f, "the disk image {}", p.display()),
        }
    }
}

/// The places a guest's files are looked for, in order: the sysroots first (the user named
/// them), then the initramfs, then the disk images.
#[derive(Debug, Default, Clone)]
pub struct GuestFiles {
    sysroots: Vec<PathBuf>,
    /// Shared: a run's sample-time unwinder and its report read the same archives.
    initrds: Vec<(PathBuf, Arc<Initrd>)>,
    images: Vec<Arc<ImagePlace>>,
}

impl GuestFiles {
    /// No places.
    pub fn new() -> Self {
        GuestFiles::default()
    }

    /// Looks in the tree under `dir` too.
    pub fn with_sysroot(mut self, dir: PathBuf) -> Self {
        self.sysroots.push(dir);
        self
    }

    /// Looks in the initramfs read from `path` too.
    pub fn with_initrd(mut self, path: PathBuf, initrd: Initrd) -> Self {
        self.initrds.push((path, Arc::new(initrd)));
        self
    }

    /// Looks in the file system of the disk image `place` too.
    pub fn with_image(mut self, place: ImagePlace) -> Self {
        self.images.push(Arc::new(place));
        self
    }

    /// True when the initramfs read from `path` is one of the places.
    pub fn has_initrd(&self, path: &Path) -> bool {
        self.initrds.iter().any(|(p, _)| p == path)
    }

    /// True when a lookup may open files (a sysroot or a disk image is among the places),
    /// which a thread that opens none (a vCPU's) cannot do; archives are in memory.
    pub fn opens_files(&self) -> bool {
        !self.sysroots.is_empty() || !self.images.is_empty()
    }

    /// True when there is nowhere to look.
    pub fn is_empty(&self) -> bool {
        self.sysroots.is_empty() && self.initrds.is_empty() && self.images.is_empty()
    }

    /// The bytes of the guest's file `path` (absolute), at most `limit` of them from a
    /// sysroot, and where they came from; None when no place has it.
    pub fn read(&self, path: &str, limit: files::bounded::Limit) -> Option<(Vec<u8>, Origin)> {
        self.read_accepted(path, limit, |_, _| true)
    }

    /// The bytes of the guest's file `path` from the first place, in order, whose copy
    /// `accept` takes (another build is turned away and the search goes on), and where they
    /// came from.
    pub fn read_accepted(
        &self,
        path: &str,
        limit: files::bounded::Limit,
        mut accept: impl FnMut(&[u8], &Origin) -> bool,
    ) -> Option<(Vec<u8>, Origin)> {
        for root in &self.sysroots {
            let Some(host) = in_sysroot(root, path) else {
                continue;
            };
            match files::bounded::read(&host, limit) {
                Ok(bytes) => {
                    let origin = Origin::Host(host);
                    if accept(&bytes, &origin) {
                        return Some((bytes, origin));
                    }
                }
                Err(e) => log::warn!("{e}"),
            }
        }
        let in_initrd = self.initrds.iter().find_map(|(p, i)| {
            let bytes = i.read(path)?;
            let origin = Origin::Initrd(p.clone());
            accept(bytes, &origin).then(|| (bytes.to_vec(), origin))
        });
        in_initrd.or_else(|| {
            self.images.iter().find_map(|place| {
                let bytes = place.read(path, limit.max)?;
                let origin = Origin::Image(place.name.clone());
                accept(&bytes, &origin).then_some((bytes, origin))
            })
        })
    }
}

/// The host path of the regular file the guest calls `path` in the tree under `root`, its
/// symbolic links resolved inside that tree (at most [`initrd::MAX_LINKS`] of them).
pub fn in_sysroot(root: &Path, path: &str) -> Option<PathBuf> {
    let host = |parts: &[String]| parts.iter().fold(root.to_path_buf(), |p, c| p.join(c));
    let parts = resolve_links(path, |parts| {
        let at = host(parts);
        let meta = std::fs::symlink_metadata(&at).map_err(drop)?;
        if !meta.file_type().is_symlink() {
            return Ok(None);
        }
        let target = std::fs::read_link(&at).map_err(drop)?;
        target.to_str().map(|t| Some(t.to_string())).ok_or(())
    })?;
    let at = host(&parts);
    std::fs::metadata(&at)
        .ok()
        .filter(|m| m.is_file())
        .map(|_| at)
}

/// The components of `path` (from the root) with every symbolic link replaced by its target:
/// an absolute target restarts from the root, `..` drops a component and stops at the root, at
/// most [`initrd::MAX_LINKS`] links are followed. `link` says what the components so far name:
/// `Ok(Some(target))` a link, `Ok(None)` anything else, `Err(())` that the lookup fails.
fn resolve_links(
    path: &str,
    mut link: impl FnMut(&[String]) -> Result<Option<String>, ()>,
) -> Option<Vec<String>> {
    let mut done: Vec<String> = Vec::new();
    let mut todo: Vec<String> = path.split('/').rev().map(String::from).collect();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "" | "." => continue,
            ".." => {
                done.pop();
                continue;
            }
            _ => done.push(c),
        }
        if let Some(target) = link(&done).ok()? {
            links += 1;
            if links > initrd::MAX_LINKS {
                return None;
            }
            done.pop();
            if target.starts_with('/') {
                done.clear();
            }
            todo.extend(target.split('/').rev().map(String::from));
        }
    }
    Some(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysroot_links_resolve_inside_the_sysroot() {
        let d = crate::symbols::testdata::temp_dir("sysroot");
        std::fs::create_dir_all(d.join("usr/lib")).unwrap();
        std::fs::create_dir_all(d.join("bin")).unwrap();
        std::fs::write(d.join("usr/lib/libc.so.6"), b"libc").unwrap();
        std::fs::write(d.join("bin/prog"), b"prog").unwrap();
        std::os::unix::fs::symlink("/usr/lib", d.join("lib")).unwrap();
        std::os::unix::fs::symlink("../../bin/prog", d.join("usr/lib/up")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("bin/host")).unwrap();
        std::os::unix::fs::symlink("../../../../../../etc/passwd", d.join("bin/out")).unwrap();
        std::os::unix::fs::symlink("self", d.join("self")).unwrap();
        let found = |p: &str| in_sysroot(&d, p);
        assert_eq!(found("/lib/libc.so.6"), Some(d.join("usr/lib/libc.so.6")));
        assert_eq!(found("/usr/lib/up"), Some(d.join("bin/prog")));
        assert_eq!(
            found("/bin/host"),
            None,
            "an absolute link stays in the sysroot"
        );
        assert_eq!(found("/bin/out"), None, "`..` stops at the sysroot's root");
        assert_eq!(found("/self"), None);
        assert_eq!(found("/usr/lib"), None, "a directory is no file");
        let files = GuestFiles::new().with_sysroot(d.clone());
        let (bytes, origin) = files
            .read("/lib/libc.so.6", files::bounded::SYMBOLS)
            .unwrap();
        assert_eq!(bytes, b"libc");
        assert_eq!(origin, Origin::Host(d.join("usr/lib/libc.so.6")));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
