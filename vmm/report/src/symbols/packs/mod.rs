//! Volatility 3 symbol packs on a symbol path: directories of ISF files, found by a Windows
//! module's CodeView identity, or by a Linux kernel's banner, as Volatility finds them.
//!
//! A plain directory entry `DIR` of the symbol path (not a `srv*` store or a `cache*`) may hold
//! a pack laid out as Volatility's `symbols/` directory, or as its `windows/` part alone:
//!
//! ```text
//! DIR/symbols/windows/<pdb name>/<GUID>-<AGE>.json.xz      (or .json.gz, .json)
//! DIR/<pdb name>/<GUID>-<AGE>.json.xz
//! ```
//!
//! with the GUID as 32 upper-case hex digits and the age in decimal
//! (`ntkrnlmp.pdb/BBED7C2955FBE4522AAA23F4B8677AD9-1.json.xz`). A name or GUID that could
//! leave the directory (it comes from guest memory) is not looked up. Volatility's zipped packs are
//! read in place ([`zipped`]): `DIR/symbols/windows.zip` or `DIR/windows.zip`, whose members are
//! laid out as the `windows/` directory (with or without that prefix), after the trees of the
//! same entry.
//!
//! Linux tables (dwarf2json's) have no such name: each holds its kernel's banner
//! (`Linux version ...`, [`isf::banner`]), and a kernel's table is the one whose banner is the
//! one read from guest memory, byte for byte once trailing newlines and NULs are dropped. They
//! are looked for under
//!
//! ```text
//! DIR/symbols/linux/**.json.xz     (or .json.gz, .json; two levels of subdirectories at most)
//! DIR/*.json.xz                    (the directory itself, without subdirectories)
//! DIR/symbols/linux.zip, DIR/linux.zip   (every member with one of those extensions)
//! ```
//!
//! Each candidate is read (bounded as `--guest-types` files are) and decompressed to find its
//! banner: at most [`MAX_LINUX_FILES`] files are examined per lookup, and a log line says when
//! a pack holds more.

mod zipped;

use std::path::{Path, PathBuf};

use files::bounded;
use introspect::os::LinuxLayout;

use super::types::isf::{self, banner};

use super::path::{Entry, SymbolPath};
use super::pdb::PdbId;
use super::store::Wanted;

pub use zipped::MAX_MEMBER_BYTES;

/// The extensions an ISF file of a pack may have, in the order they are tried.
pub const EXTENSIONS: [&str; 3] = ["json.xz", "json.gz", "json"];

/// An ISF file of a pack: a file of a tree, or a member of a zipped pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackFile {
    /// A file.
    File(PathBuf),
    /// The member `member` of the zip archive `archive`.
    Zipped {
        /// The archive.
        archive: PathBuf,
        /// The member's name in it.
        member: String,
    },
}

impl std::fmt::Display for PackFile {
    /// The file's path, or `ARCHIVE!MEMBER`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackFile::File(p) => write!(f, "{}", p.display()),
            PackFile::Zipped { archive, member } => write!(f, "{}!{member}", archive.display()),
        }
    }
}

impl PackFile {
    /// Its bytes, bounded as a `--guest-types` file's (a member as [`MAX_MEMBER_BYTES`]).
    pub fn read(&self) -> Result<Vec<u8>, String> {
        PackReader::default().read(self)
    }
}

/// Reads pack files one after another, keeping the last zip archive open, so the files of one
/// archive cost one read of its central directory.
#[derive(Default)]
pub struct PackReader {
    open: Option<zipped::Archive>,
}

impl PackReader {
    /// The bytes of `file`.
    pub fn read(&mut self, file: &PackFile) -> Result<Vec<u8>, String> {
        match file {
            PackFile::File(p) => bounded::read(p, bounded::SYMBOLS).map_err(|e| e.to_string()),
            PackFile::Zipped { archive, member } => {
                if self.open.as_ref().is_none_or(|a| a.path() != archive) {
                    self.open = Some(zipped::Archive::open(archive)?);
                }
                self.open
                    .as_mut()
                    .expect("opened above")
                    .read(member, MAX_MEMBER_BYTES)
            }
        }
    }
}

/// The ISF files that the packs on `path` hold for the PDB `name` with identity `id`, in the
/// symbol path's order: each a regular file at one of the places above. Whether each really
/// is that build is for its reader to check (its `metadata.windows.pdb`).
pub fn windows_isf_files(path: &SymbolPath, name: &str, id: &PdbId) -> Vec<PackFile> {
    if let Some(why) = Wanted::pdb(name, id.clone()).refusal() {
        log::warn!("{name:?}: no symbol pack looked up: {why}");
        return Vec::new();
    }
    let file = format!("{}-{}", id.guid.to_ascii_uppercase(), id.age);
    let mut found = Vec::new();
    for entry in path.entries() {
        let Entry::Dir(dir) = entry else { continue };
        for root in [dir.join("symbols").join("windows"), dir.clone()] {
            for ext in EXTENSIONS {
                let p = root.join(name).join(format!("{file}.{ext}"));
                if p.is_file() {
                    found.push(PackFile::File(p));
                }
            }
        }
        for archive in zipped::archives(dir, "windows") {
            let zip = match zipped::Archive::open(&archive) {
                Ok(zip) => zip,
                Err(e) => {
                    log::warn!("{}: {e}: ignored", archive.display());
                    continue;
                }
            };
            for prefix in ["windows/", ""] {
                for ext in EXTENSIONS {
                    let member = format!("{prefix}{name}/{file}.{ext}");
                    if zip.has(&member) {
                        found.push(PackFile::Zipped {
                            archive: archive.clone(),
                            member,
                        });
                    }
                }
            }
        }
    }
    found
}

/// The most files of Linux packs examined by one lookup (each is decompressed to find its
/// banner; Volatility's own Linux pack holds a few thousand).
pub const MAX_LINUX_FILES: usize = 4096;

/// Subdirectory levels searched under `symbols/linux/`.
const LINUX_DEPTH: usize = 2;

/// The Linux table a pack holds for a banner read from guest memory.
#[derive(Debug)]
pub struct LinuxMatch {
    /// The file.
    pub file: PackFile,
    /// Which of the banners looked for it is (an index into them).
    pub banner: usize,
    /// Its layout.
    pub layout: LinuxLayout,
    /// `linux_banner`'s link-time address, when the file gives it (for the KASLR slide).
    pub banner_address: Option<u64>,
}

/// The ISF files of the Linux packs on `path`, in the symbol path's order (by name within a
/// directory), at most `max` of them; the bool is true when more were there.
pub fn linux_isf_files(path: &SymbolPath, max: usize) -> (Vec<PackFile>, bool) {
    let mut found = Vec::new();
    let mut more = false;
    for entry in path.entries() {
        let Entry::Dir(dir) = entry else { continue };
        for (root, depth) in [
            (dir.join("symbols").join("linux"), LINUX_DEPTH),
            (dir.clone(), 0),
        ] {
            collect(&root, depth, max, &mut found, &mut more);
        }
        for archive in zipped::archives(dir, "linux") {
            match zipped::Archive::open(&archive) {
                Ok(zip) => {
                    for member in zip.names(|n| is_isf_name(Path::new(n))) {
                        if found.len() >= max {
                            more = true;
                            break;
                        }
                        found.push(PackFile::Zipped {
                            archive: archive.clone(),
                            member,
                        });
                    }
                }
                Err(e) => log::warn!("{}: {e}: ignored", archive.display()),
            }
        }
    }
    (found, more)
}

/// Adds the ISF files under `dir` (`depth` levels of subdirectories) to `found`, up to `max`.
fn collect(dir: &Path, depth: usize, max: usize, found: &mut Vec<PackFile>, more: &mut bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    for p in names {
        // No symbolic links followed: a pack is a plain tree.
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if depth > 0 {
                collect(&p, depth - 1, max, found, more);
            }
        } else if meta.is_file() && is_isf_name(&p) {
            if found.len() >= max {
                *more = true;
                return;
            }
            found.push(PackFile::File(p));
        }
    }
}

fn is_isf_name(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| EXTENSIONS.iter().any(|e| n.ends_with(&format!(".{e}"))))
}

/// The Linux table, among the packs on `path`, whose banner is one of `banners` (read from
/// guest memory; compared trimmed of trailing newlines and NULs): the first file in path order
/// that matches. A file that cannot be read, is not a Linux table, has no banner or whose
/// matching table does not read is passed over with a log line saying why. `stop` is asked
/// before each file: true ends the lookup (the run is over).
pub fn linux_isf_layout(
    path: &SymbolPath,
    banners: &[Vec<u8>],
    stop: &dyn Fn() -> bool,
) -> Result<LinuxMatch, String> {
    let wanted: Vec<&[u8]> = banners.iter().map(|b| banner::trim(b)).collect();
    let (files, more) = linux_isf_files(path, MAX_LINUX_FILES);
    if more {
        log::warn!(
            "Linux symbol packs: only the first {MAX_LINUX_FILES} ISF files are examined for the kernel's banner"
        );
    }
    if files.is_empty() {
        return Err("no Linux ISF file on the symbol path".into());
    }
    let mut reader = PackReader::default();
    for file in &files {
        if stop() {
            return Err("the lookup was stopped".into());
        }
        match linux_file(&mut reader, file, &wanted) {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => {}
            Err(why) => log::info!("{file}: {why}: skipped"),
        }
    }
    Err(format!(
        "none of the {} Linux ISF files on the symbol path has the guest's banner",
        files.len()
    ))
}

/// The table in `file` if its banner is one of `wanted`.
fn linux_file(
    reader: &mut PackReader,
    file: &PackFile,
    wanted: &[&[u8]],
) -> Result<Option<LinuxMatch>, String> {
    let bytes = reader.read(file)?;
    let json = isf::compressed::unpack(&bytes, isf::compressed::MAX_JSON_BYTES)
        .map_err(|e| e.to_string())?;
    let found = banner::linux_banner(&json).map_err(|e| e.to_string())?;
    let Some(index) = wanted.iter().position(|w| *w == found.text.as_slice()) else {
        return Ok(None);
    };
    let table = isf::parse(&json).map_err(|e| e.to_string())?;
    let layout = isf::linux_layout(&table).map_err(|e| e.to_string())?;
    log::info!("guest kernel layout from {file} (its banner matches)");
    Ok(Some(LinuxMatch {
        file: file.clone(),
        banner: index,
        layout,
        banner_address: found.address,
    }))
}

#[cfg(test)]
mod tests;
