//! Symbol stores on a file system: what a file is looked up by, where a store keeps it, how
//! a candidate is checked, and how a copy is put in place atomically.
//!
//! A store keeps a file at `<name>/<key>/<name>` (the symbol-server layout), where the key is
//! a PDB's GUID followed by its age in hex, or an image's TimeDateStamp (8 hex digits)
//! followed by its SizeOfImage in hex. A file is used only when its own identity is the one
//! looked for: a PDB of another build would name the wrong functions.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::pdb::{self, PdbId};

/// What a file must be to be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A PDB with this GUID and age.
    Pdb(PdbId),
    /// A PE image with this file-header TimeDateStamp and SizeOfImage.
    Image {
        /// TimeDateStamp.
        timestamp: u32,
        /// SizeOfImage.
        size: u32,
    },
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Pdb(id) => write!(f, "GUID {} age {}", id.guid, id.age),
            Identity::Image { timestamp, size } => {
                write!(f, "timestamp {timestamp:08X} size {size:#x}")
            }
        }
    }
}

/// A file looked up by name and identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// Its file name (`ntkrnlmp.pdb`, `ntoskrnl.exe`).
    pub name: String,
    /// What it must be.
    pub identity: Identity,
}

/// Why a candidate file is not the one wanted.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// It could not be opened or read.
    #[error("cannot read it")]
    Read(#[source] std::io::Error),
    /// It is not a regular file, or is above the size limit of a symbol file.
    #[error("refused")]
    Refused(#[source] files::bounded::InputError),
    /// It is not a PDB (or PE image) at all.
    #[error("not a readable {0}")]
    Format(&'static str),
    /// It is another build.
    #[error("it has {found}, not the {expected} wanted")]
    Mismatch {
        /// The identity looked for.
        expected: Identity,
        /// The file's.
        found: Identity,
    },
}

impl Wanted {
    /// A PDB named `name` with identity `id`.
    pub fn pdb(name: &str, id: PdbId) -> Self {
        Wanted {
            name: name.to_string(),
            identity: Identity::Pdb(id),
        }
    }

    /// A PE image named `name` with this TimeDateStamp and SizeOfImage.
    pub fn image(name: &str, timestamp: u32, size: u32) -> Self {
        Wanted {
            name: name.to_string(),
            identity: Identity::Image { timestamp, size },
        }
    }

    /// The symbol-server key: `<GUID><age hex>` or `<TIMESTAMP 8 hex><SizeOfImage hex>`.
    pub fn key(&self) -> String {
        match &self.identity {
            Identity::Pdb(id) => id.key(),
            Identity::Image { timestamp, size } => format!("{timestamp:08X}{size:X}"),
        }
    }

    /// `<name>/<key>/<name>`, relative to a store.
    pub fn server_path(&self) -> String {
        format!("{0}/{1}/{0}", self.name, self.key())
    }

    /// [`Wanted::server_path`] for a URL: the name percent-encoded beyond letters, digits
    /// and `-._~`.
    pub fn url_path(&self) -> String {
        let mut name = String::new();
        for b in self.name.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                name.push(char::from(b));
            } else {
                name.push_str(&format!("%{b:02X}"));
            }
        }
        format!("{0}/{1}/{0}", name, self.key())
    }

    /// Why its name or key cannot name a file in a store, if so. Both can come from a
    /// hostile guest (a CodeView record, a module's export name) or an edited profile.json:
    /// only a plain file name and a hex key are looked up, so nothing outside a store is
    /// read or written.
    pub fn refusal(&self) -> Option<&'static str> {
        let name = self.name.as_str();
        if name.is_empty() || name == "." || name == ".." || name.len() > 255 {
            return Some("not a file name");
        }
        if name.contains(['/', '\\', ':']) || name.chars().any(char::is_control) {
            return Some("a file name with a separator or control character");
        }
        let key = self.key();
        (key.is_empty() || !key.bytes().all(|b| b.is_ascii_hexdigit()))
            .then_some("a GUID that is not hex digits")
    }

    /// Where `store` keeps it.
    pub fn in_store(&self, store: &Path) -> PathBuf {
        store.join(&self.name).join(self.key()).join(&self.name)
    }

    /// Checks that the file at `path` is the one wanted.
    pub fn check(&self, path: &Path) -> Result<(), CheckError> {
        // A FIFO or device planted in a store would block or never end: refused unread.
        let (mut file, _) = files::bounded::open(path, files::bounded::SYMBOLS, false)
            .map_err(CheckError::Refused)?;
        let found = match &self.identity {
            Identity::Pdb(_) => Identity::Pdb(pdb_id(&mut file)?),
            Identity::Image { .. } => image_id(&mut file)?,
        };
        if found == self.identity {
            Ok(())
        } else {
            Err(CheckError::Mismatch {
                expected: self.identity.clone(),
                found,
            })
        }
    }

    /// `path` if it exists and is the file wanted; a file that is another build (or not
    /// readable) is passed over with a warning naming it.
    pub fn accept(&self, path: PathBuf) -> Option<PathBuf> {
        if !path.is_file() {
            return None;
        }
        match self.check(&path) {
            Ok(()) => Some(path),
            Err(e) => {
                log::warn!("{}: {e}: ignored", path.display());
                None
            }
        }
    }

    /// The file in `dir`: in symbol-server layout, then (with `flat`) at `dir/<name>`.
    pub fn look_in(&self, dir: &Path, flat: bool) -> Option<PathBuf> {
        let flat = flat.then(|| dir.join(&self.name));
        std::iter::once(self.in_store(dir))
            .chain(flat)
            .find_map(|p| self.accept(p))
    }
}

fn pdb_id(file: &mut File) -> Result<PdbId, CheckError> {
    pdb::id_from(file).map_err(|_| CheckError::Format("PDB"))
}

/// The TimeDateStamp and SizeOfImage of a PE image's headers.
fn image_id(file: &mut File) -> Result<Identity, CheckError> {
    let mut head = Vec::new();
    file.take(4096)
        .read_to_end(&mut head)
        .map_err(CheckError::Read)?;
    pe_identity(&head).ok_or(CheckError::Format("PE image"))
}

/// TimeDateStamp and SizeOfImage from the first bytes of a PE image.
pub(crate) fn pe_identity(head: &[u8]) -> Option<Identity> {
    let u32_at = |off: usize| -> Option<u32> {
        let b = head.get(off..off.checked_add(4)?)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    };
    if head.get(..2)? != b"MZ" {
        return None;
    }
    let pe = usize::try_from(u32_at(0x3c)?).ok()?;
    if head.get(pe..pe.checked_add(4)?)? != b"PE\0\0" {
        return None;
    }
    // The file header follows the signature (TimeDateStamp at +4 in it); SizeOfImage is at
    // +56 in the optional header after it, for PE32 and PE32+ alike.
    Some(Identity::Image {
        timestamp: u32_at(pe + 8)?,
        size: u32_at(pe + 24 + 56)?,
    })
}

/// Copies `from` into `store` in symbol-server layout, atomically (through
/// [`files::atomic`]): a reader never sees half a file. Returns the copy's path.
pub fn install(from: &Path, wanted: &Wanted, store: &Path) -> std::io::Result<PathBuf> {
    let target = wanted.in_store(store);
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let staged = files::atomic::stage(&target, files::atomic::Naming::InDir, |w| {
        File::open(from)
            .and_then(|mut f| std::io::copy(&mut f, w).map(drop))
            .map_err(|e| files::atomic::WriteError::File(target.clone(), e))
    })
    .map_err(files::atomic::WriteError::into_io)?;
    staged.commit().map_err(files::atomic::WriteError::into_io)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::symbols::testdata::{fake_pdb, fake_pe, temp_dir};

    fn id(age: u32) -> PdbId {
        PdbId {
            guid: "00112233445566778899AABBCCDDEEFF".into(),
            age,
        }
    }

    #[test]
    fn keys_and_layout() {
        let w = Wanted::pdb("a.pdb", id(10));
        assert_eq!(w.key(), "00112233445566778899AABBCCDDEEFFA");
        assert_eq!(
            w.server_path(),
            "a.pdb/00112233445566778899AABBCCDDEEFFA/a.pdb"
        );
        let i = Wanted::image("ntoskrnl.exe", 0x5eed_1234, 0xa0_0000);
        assert_eq!(i.key(), "5EED1234A00000");
        assert_eq!(
            i.in_store(Path::new("/s")),
            Path::new("/s/ntoskrnl.exe/5EED1234A00000/ntoskrnl.exe")
        );
        assert_eq!(Wanted::image("x", 1, 2).key(), "000000012");
    }

    #[test]
    fn names_that_could_leave_a_store_are_refused() {
        for name in [
            "",
            ".",
            "..",
            "a/b.pdb",
            "a\\b.pdb",
            "c:x.pdb",
            "a\u{1}.pdb",
        ] {
            assert!(Wanted::pdb(name, id(1)).refusal().is_some(), "{name:?}");
        }
        let bad_guid = PdbId {
            guid: "../../x".into(),
            age: 1,
        };
        assert!(Wanted::pdb("a.pdb", bad_guid).refusal().is_some());
        let spaced = Wanted::pdb("My App+.pdb", id(1));
        assert_eq!(spaced.refusal(), None);
        assert_eq!(
            spaced.url_path(),
            "My%20App%2B.pdb/00112233445566778899AABBCCDDEEFF1/My%20App%2B.pdb"
        );
    }

    #[test]
    fn a_pdb_is_found_in_layout_or_flat_and_only_with_its_guid_and_age() {
        let dir = temp_dir("store-lookup");
        let w = Wanted::pdb("a.pdb", id(2));
        assert_eq!(w.look_in(&dir, true), None);
        // Flat, in a plain directory only.
        let flat = dir.join("flat");
        std::fs::create_dir_all(&flat).unwrap();
        std::fs::write(flat.join("a.pdb"), fake_pdb(&id(2))).unwrap();
        assert_eq!(w.look_in(&flat, true), Some(flat.join("a.pdb")));
        assert_eq!(w.look_in(&flat, false), None, "stores are not flat");
        // In the symbol-server layout.
        let slot = w.in_store(&dir);
        std::fs::create_dir_all(slot.parent().unwrap()).unwrap();
        std::fs::write(&slot, fake_pdb(&id(2))).unwrap();
        assert_eq!(w.look_in(&dir, true), Some(slot.clone()));
        assert_eq!(w.look_in(&dir, false), Some(slot.clone()));

        // The same GUID with another age, or another GUID, is never used.
        std::fs::write(&slot, fake_pdb(&id(3))).unwrap();
        std::fs::write(flat.join("a.pdb"), fake_pdb(&id(1))).unwrap();
        assert_eq!(w.look_in(&dir, true), None);
        assert_eq!(w.look_in(&flat, true), None);
        let e = w.check(&slot).unwrap_err().to_string();
        assert!(e.contains("age 3") && e.contains("age 2"), "{e}");
        let other = PdbId {
            guid: "F".repeat(32),
            age: 2,
        };
        std::fs::write(&slot, fake_pdb(&other)).unwrap();
        let e = w.check(&slot).unwrap_err();
        assert!(matches!(e, CheckError::Mismatch { .. }), "{e}");
        assert!(e.to_string().contains(&"F".repeat(32)), "{e}");
        std::fs::write(&slot, b"not a PDB").unwrap();
        assert!(matches!(w.check(&slot), Err(CheckError::Format("PDB"))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_image_is_found_by_timestamp_and_size() {
        let dir = temp_dir("store-image");
        let w = Wanted::image("app.exe", 0x1234_5678, 0x3000);
        let slot = w.in_store(&dir);
        std::fs::create_dir_all(slot.parent().unwrap()).unwrap();
        std::fs::write(&slot, fake_pe(0x1234_5678, 0x3000)).unwrap();
        assert_eq!(w.look_in(&dir, false), Some(slot.clone()));
        std::fs::write(&slot, fake_pe(0x1234_5678, 0x4000)).unwrap();
        assert_eq!(w.look_in(&dir, false), None);
        assert_eq!(pe_identity(b"MZ"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn install_copies_atomically_into_the_layout() {
        let dir = temp_dir("store-install");
        let w = Wanted::pdb("a.pdb", id(1));
        let src = dir.join("src.pdb");
        std::fs::write(&src, fake_pdb(&id(1))).unwrap();
        let store = dir.join("store");
        let copy = install(&src, &w, &store).unwrap();
        assert_eq!(copy, w.in_store(&store));
        assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(&src).unwrap());
        // Nothing else is left in the slot: the temporary file was renamed.
        let left: Vec<_> = std::fs::read_dir(copy.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["a.pdb"]);
        // A copy that fails leaves no temporary file behind.
        assert!(install(&dir.join("missing"), &w, &store).is_err());
        assert_eq!(
            std::fs::read_dir(copy.parent().unwrap()).unwrap().count(),
            1
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
