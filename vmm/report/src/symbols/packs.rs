//! Volatility 3 symbol packs on a symbol path: directories of ISF files, found by a Windows
//! module's CodeView identity as Volatility finds them.
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

use std::path::PathBuf;

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
