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
//! leave the directory (it comes from guest memory) is not looked up. Zipped packs are not read:
//! unzip them into such a directory.
//!
//! Linux tables (dwarf2json's) have no such name: each holds its kernel's banner
//! (`Linux version ...`, [`isf::banner`]), and a kernel's table is the one whose banner is the
//! one read from guest memory, byte for byte once trailing newlines and NULs are dropped. They
//! are looked for under
//!
//! ```text
//! DIR/symbols/linux/**.json.xz     (or .json.gz, .json; two levels of subdirectories at most)
//! DIR/*.json.xz                    (the directory itself, without subdirectories)
//! ```
//!
//! Each candidate is read (bounded as `--guest-types` files are) and decompressed to find its
//! banner: at most [`MAX_LINUX_FILES`] files are examined per lookup, and a log line says when
//! a pack holds more.

use std::path::{Path, PathBuf};

use files::bounded;
use introspect::os::LinuxLayout;

use super::types::isf::{self, banner};

use super::path::{Entry, SymbolPath};
use super::pdb::PdbId;
use super::store::Wanted;

/// The extensions an ISF file of a pack may have, in the order they are tried.
pub const EXTENSIONS: [&str; 3] = ["json.xz", "json.gz", "json"];

/// The ISF files that the packs on `path` hold for the PDB `name` with identity `id`, in the
/// symbol path's order: each a regular file at one of the places above. Whether each really
/// is that build is for its reader to check (its `metadata.windows.pdb`).
pub fn windows_isf_files(path: &SymbolPath, name: &str, id: &PdbId) -> Vec<PathBuf> {
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
                    found.push(p);
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
    pub file: PathBuf,
    /// Which of the banners looked for it is (an index into them).
    pub banner: usize,
    /// Its layout.
    pub layout: LinuxLayout,
    /// `linux_banner`'s link-time address, when the file gives it (for the KASLR slide).
    pub banner_address: Option<u64>,
}

/// The ISF files of the Linux packs on `path`, in the symbol path's order (by name within a
/// directory), at most `max` of them; the bool is true when more were there.
pub fn linux_isf_files(path: &SymbolPath, max: usize) -> (Vec<PathBuf>, bool) {
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
    }
    (found, more)
}

/// Adds the ISF files under `dir` (`depth` levels of subdirectories) to `found`, up to `max`.
fn collect(dir: &Path, depth: usize, max: usize, found: &mut Vec<PathBuf>, more: &mut bool) {
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
            found.push(p);
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
    for file in &files {
        if stop() {
            return Err("the lookup was stopped".into());
        }
        match linux_file(file, &wanted) {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => {}
            Err(why) => log::info!("{}: {why}: skipped", file.display()),
        }
    }
    Err(format!(
        "none of the {} Linux ISF files on the symbol path has the guest's banner",
        files.len()
    ))
}

/// The table in `file` if its banner is one of `wanted`.
fn linux_file(file: &Path, wanted: &[&[u8]]) -> Result<Option<LinuxMatch>, String> {
    let bytes = bounded::read(file, bounded::SYMBOLS).map_err(|e| e.to_string())?;
    let json = isf::compressed::unpack(&bytes, isf::compressed::MAX_JSON_BYTES)
        .map_err(|e| e.to_string())?;
    let found = banner::linux_banner(&json).map_err(|e| e.to_string())?;
    let Some(index) = wanted.iter().position(|w| *w == found.text.as_slice()) else {
        return Ok(None);
    };
    let table = isf::parse(&json).map_err(|e| e.to_string())?;
    let layout = isf::linux_layout(&table).map_err(|e| e.to_string())?;
    log::info!(
        "guest kernel layout from {} (its banner matches)",
        file.display()
    );
    Ok(Some(LinuxMatch {
        file: file.to_path_buf(),
        banner: index,
        layout,
        banner_address: found.address,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::testdata::temp_dir;

    const GUID: &str = "BBED7C2955FBE4522AAA23F4B8677AD9";

    fn put(p: PathBuf) -> PathBuf {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"{}").unwrap();
        p
    }

    #[test]
    fn packs_are_found_in_volatility_layout_with_or_without_its_prefix_in_path_order() {
        let d = temp_dir("packs");
        let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
        let in_a = put(a.join(format!("symbols/windows/ntkrnlmp.pdb/{GUID}-1.json.xz")));
        let in_b = put(b.join(format!("ntkrnlmp.pdb/{GUID}-1.json")));
        let in_b_gz = put(b.join(format!("ntkrnlmp.pdb/{GUID}-1.json.gz")));
        // Another age, another GUID, another PDB name, a directory where a file should be.
        put(c.join(format!("ntkrnlmp.pdb/{GUID}-2.json.xz")));
        put(c.join("ntkrnlmp.pdb/00000000000000000000000000000000-1.json.xz"));
        put(c.join(format!("ntoskrnl.pdb/{GUID}-1.json.xz")));
        std::fs::create_dir_all(c.join(format!("ntkrnlmp.pdb/{GUID}-1.json"))).unwrap();
        let path = SymbolPath::parse(
            &format!(
                "{};{};{};srv*{}",
                c.display(),
                b.display(),
                a.display(),
                a.display()
            ),
            None,
        )
        .unwrap();
        let id = |guid: &str, age| PdbId {
            guid: guid.into(),
            age,
        };
        assert_eq!(
            windows_isf_files(&path, "ntkrnlmp.pdb", &id(&GUID.to_lowercase(), 1)),
            vec![in_b_gz, in_b, in_a]
        );
        assert!(windows_isf_files(&path, "ntkrnlmp.pdb", &id(GUID, 3)).is_empty());
        // Names and GUIDs from a hostile guest that would leave the directory.
        assert!(windows_isf_files(&path, "../ntkrnlmp.pdb", &id(GUID, 1)).is_empty());
        assert!(windows_isf_files(&path, "ntkrnlmp.pdb", &id("../../x", 1)).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[cfg(test)]
mod linux_tests {
    use super::*;
    use crate::symbols::testdata::temp_dir;
    use crate::symbols::types::isf::tests::{fixtures, xz};

    const BANNER: &str = "Linux version 6.1.0-13-amd64 (debian-kernel@lists.debian.org) \
                          (gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29)\n\0";

    fn b64(data: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in data.chunks(3) {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for i in 0..=c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i)) as usize & 63]));
            }
            for _ in c.len()..3 {
                out.push('=');
            }
        }
        out
    }

    /// A Linux table whose banner is `banner` and whose task_struct is `size` bytes.
    fn table(banner: &str, size: u64) -> Vec<u8> {
        let mut v = fixtures::linux();
        v["symbols"]["linux_banner"]["constant_data"] = b64(banner.as_bytes()).into();
        v["user_types"]["task_struct"]["size"] = size.into();
        serde_json::to_vec(&v).unwrap()
    }

    fn put(p: PathBuf, bytes: &[u8]) -> PathBuf {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn path(dirs: &[&Path]) -> SymbolPath {
        let s: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        SymbolPath::parse(&s.join(";"), None).unwrap()
    }

    #[test]
    fn the_helper_encodes_base64_as_the_reader_decodes_it() {
        for s in ["", "L", "Li", "Lin", "Linux version\n\0"] {
            let e = b64(s.as_bytes());
            assert_eq!(banner::base64(e.as_bytes()).unwrap(), s.as_bytes(), "{e}");
        }
    }

    #[test]
    fn the_table_whose_banner_matches_is_read_plain_or_xz() {
        let d = temp_dir("linux-packs");
        let other = "Linux version 5.10.0-26-amd64 (debian-kernel@lists.debian.org) #1 SMP\n\0";
        put(d.join("symbols/linux/5.10.json"), &table(other, 0x2000));
        let want = put(
            d.join("symbols/linux/debian/6.1.json.xz"),
            &xz(&table(BANNER, 0x2400)),
        );
        let p = path(&[&d]);
        // What guest memory holds: the banner up to its NUL, newline included.
        let guest = BANNER.trim_end_matches('\0').as_bytes().to_vec();
        let m =
            linux_isf_layout(&p, &[b"Linux version 4.19\n".to_vec(), guest], &|| false).unwrap();
        assert_eq!(m.file, want);
        assert_eq!(m.banner, 1);
        assert_eq!(m.layout.task_struct.size, 0x2400);
        assert_eq!(m.banner_address, Some(0xffff_ffff_8220_0100));
        // The other file matches its own banner only, exactly.
        let m = linux_isf_layout(&p, &[other.as_bytes().to_vec()], &|| false).unwrap();
        assert_eq!(m.layout.task_struct.size, 0x2000);
        let prefix = &BANNER.as_bytes()[..40];
        assert!(linux_isf_layout(&p, &[prefix.to_vec()], &|| false).is_err());
        // A lookup told to stop reads no file.
        let err = linux_isf_layout(&p, &[other.as_bytes().to_vec()], &|| true).unwrap_err();
        assert!(err.contains("stopped"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn no_match_and_malformed_files_are_passed_over() {
        let d = temp_dir("linux-packs-bad");
        // Beside the pack's tree, in the directory itself: a corrupt xz file, a non-JSON file,
        // a Windows table, a Linux table without a banner, then the one that matches.
        put(d.join("a.json.xz"), b"\xfd7zXZ\0 corrupt");
        put(d.join("b.json"), b"not json");
        let mut win = fixtures::win10();
        win["symbols"]["linux_banner"] = serde_json::json!({"address": 0});
        put(d.join("c.json"), &serde_json::to_vec(&win).unwrap());
        let mut nobanner = fixtures::linux();
        nobanner["symbols"]
            .as_object_mut()
            .unwrap()
            .remove("linux_banner");
        put(d.join("d.json"), &serde_json::to_vec(&nobanner).unwrap());
        put(d.join("e.json.gz.txt"), &table(BANNER, 0x2400));
        let p = path(&[&d]);
        let guest = BANNER.as_bytes().to_vec();
        let err = linux_isf_layout(&p, std::slice::from_ref(&guest), &|| false).unwrap_err();
        assert!(err.contains("none of the 4 Linux ISF files"), "{err}");
        let want = put(d.join("f.json"), &table(BANNER, 0x2400));
        assert_eq!(
            linux_isf_layout(&p, &[guest], &|| false).unwrap().file,
            want
        );
        // A banner that matches but a table that does not read is no match either.
        let mut broken = fixtures::linux();
        broken["symbols"]["linux_banner"]["constant_data"] = b64(b"Linux version 7\n").into();
        broken["user_types"]
            .as_object_mut()
            .unwrap()
            .remove("task_struct");
        put(d.join("g.json"), &serde_json::to_vec(&broken).unwrap());
        assert!(linux_isf_layout(&p, &[b"Linux version 7".to_vec()], &|| false).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_examined_are_capped_and_subdirectories_bounded() {
        let d = temp_dir("linux-packs-cap");
        for i in 0..5 {
            put(d.join(format!("symbols/linux/{i}.json")), b"{}");
        }
        put(d.join("symbols/linux/a/b/c/deep.json"), b"{}");
        put(d.join("symbols/linux/a/b/shallow.json"), b"{}");
        put(d.join("sub/not-searched.json"), b"{}");
        let (files, more) = linux_isf_files(&path(&[&d]), 3);
        assert_eq!(files.len(), 3);
        assert!(more);
        let (files, more) = linux_isf_files(&path(&[&d]), 100);
        assert!(!more);
        let names: Vec<_> = files
            .iter()
            .map(|f| f.strip_prefix(&d).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "symbols/linux/0.json",
                "symbols/linux/1.json",
                "symbols/linux/2.json",
                "symbols/linux/3.json",
                "symbols/linux/4.json",
                "symbols/linux/a/b/shallow.json"
            ]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
