//! Volatility's zipped packs: `windows.zip` and `linux.zip`, each holding what the pack's
//! `windows/` or `linux/` directory would, under that directory's name or at the archive's
//! root (`windows/ntkrnlmp.pdb/<GUID>-<AGE>.json.xz` or `ntkrnlmp.pdb/<GUID>-<AGE>.json.xz`).
//!
//! An archive is a user's file, read as bounded as the others: a regular file no larger than
//! [`bounded::SYMBOLS`], only its central directory read to list it, members stored or
//! deflated, each one read no further than [`MAX_MEMBER_BYTES`] (however large it says it is)
//! and checked against its CRC. A member that is encrypted, a directory or a link is no ISF
//! file.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use files::bounded;
use zip::ZipArchive;

use crate::symbols::types::isf::compressed::MAX_JSON_BYTES;

/// The most bytes read of one member: an ISF file, compressed or not, is at most what its
/// reader accepts decompressed.
pub const MAX_MEMBER_BYTES: u64 = MAX_JSON_BYTES;

/// The archives a pack directory `dir` may hold for `os` (`"windows"` or `"linux"`), as
/// Volatility names them: `dir/symbols/<os>.zip`, then `dir/<os>.zip`; those that are regular
/// files (no symbolic link followed).
pub fn archives(dir: &Path, os: &str) -> Vec<PathBuf> {
    let name = format!("{os}.zip");
    [dir.join("symbols").join(&name), dir.join(name)]
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .collect()
}

/// An open archive and its path.
pub struct Archive {
    path: PathBuf,
    zip: ZipArchive<File>,
}

impl Archive {
    /// Opens the archive at `path` and reads its central directory.
    pub fn open(path: &Path) -> Result<Archive, String> {
        let (file, _) = bounded::open(path, bounded::SYMBOLS, false).map_err(|e| e.to_string())?;
        let zip = ZipArchive::new(file).map_err(|e| format!("not a zip archive: {e}"))?;
        Ok(Archive {
            path: path.to_owned(),
            zip,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the archive has a member named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.zip.index_for_name(name).is_some()
    }

    /// Its members' names that `keep` accepts, in the archive's order: those whose names are
    /// not valid UTF-8 are passed over.
    pub fn names(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        self.zip
            .file_names()
            .filter_map(Result::ok)
            .filter(|n| keep(n))
            .map(|n| n.into_owned())
            .collect()
    }

    /// The member `name`, whole and checked against its CRC, if it is at most `max` bytes
    /// ([`MAX_MEMBER_BYTES`] for an ISF file): what it says of its size is checked, and it is
    /// read no further than one byte past `max` whatever it says.
    pub fn read(&mut self, name: &str, max: u64) -> Result<Vec<u8>, String> {
        let mut member = self.zip.by_name(name).map_err(|e| e.to_string())?;
        if !member.is_file() || member.is_symlink() {
            return Err("not a file".into());
        }
        let over = || format!("over the {max}-byte limit for a member");
        if member.size() > max {
            return Err(over());
        }
        let mut out = Vec::new();
        (&mut member)
            .take(max + 1)
            .read_to_end(&mut out)
            .map_err(|e| e.to_string())?;
        if out.len() as u64 > max {
            return Err(over());
        }
        Ok(out)
    }
}
