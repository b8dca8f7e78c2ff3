//! PE fixtures built at test time: a C file of tests/fixtures/pe/ compiled with
//! `clang --target=x86_64-pc-windows-msvc` and linked /fixed at a chosen base with
//! `lld-link /debug`, so the image names its PDB in a CodeView record (Debian's clang, lld).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{tool, TempDir};

/// What to build.
pub struct PeSpec<'a> {
    /// The C file in tests/fixtures/pe/.
    pub source: &'a str,
    /// The image's file name (its export directory's name, if it exports anything).
    pub image: &'a str,
    /// The PDB's file name.
    pub pdb: &'a str,
    /// The entry point's symbol.
    pub entry: &'a str,
    /// The base it is linked at.
    pub base: u64,
    /// More lld-link arguments.
    pub link: &'a [&'a str],
    /// More clang arguments (`-D` defines, `-I` directories).
    pub cflags: &'a [&'a str],
}

/// A built image and its PDB.
pub struct PeModule {
    /// The image.
    pub exe: PathBuf,
    /// Its PDB.
    pub pdb: PathBuf,
}

impl PeModule {
    /// Builds `spec` into `dir`.
    pub fn build(dir: &TempDir, spec: &PeSpec) -> PeModule {
        let src = super::workspace_root()
            .join("tests/fixtures/pe")
            .join(spec.source);
        let obj = dir.join(&format!("{}.obj", spec.image));
        let exe = dir.join(spec.image);
        let pdb = dir.join(spec.pdb);
        let os = |s: String| OsString::from(s);
        tool(
            "clang",
            "clang",
            &[
                os("--target=x86_64-pc-windows-msvc".into()),
                os("-O2".into()),
                os("-g".into()),
                os("-gcodeview".into()),
                os("-c".into()),
            ]
            .into_iter()
            .chain(spec.cflags.iter().map(|f| os(f.to_string())))
            .chain([
                src.into_os_string(),
                os("-o".into()),
                obj.clone().into_os_string(),
            ])
            .collect::<Vec<_>>(),
        );
        let mut args: Vec<OsString> = vec![
            os(format!("/entry:{}", spec.entry)),
            os("/subsystem:native".into()),
            os("/fixed".into()),
            os(format!("/base:{:#x}", spec.base)),
            os("/nodefaultlib".into()),
            os("/debug".into()),
            os(format!("/pdb:{}", pdb.display())),
            os(format!("/out:{}", exe.display())),
        ];
        args.extend(spec.link.iter().map(|a| os(a.to_string())));
        args.push(obj.into_os_string());
        tool("lld-link", "lld", &args);
        PeModule { exe, pdb }
    }

    /// The PDB the module names in its CodeView record.
    pub fn pdb_ref(&self) -> report::symbols::pe::PdbRef {
        report::symbols::pe::pdb_ref(&std::fs::read(&self.exe).unwrap())
            .unwrap()
            .expect("the module names its PDB")
    }

    /// Gives the image's CodeView record the PDB identity `guid` (32 hex digits in the
    /// symbol-server order, as [`report::symbols::pdb::PdbId`] has it) and `age`, as if it had
    /// been linked with that PDB. The image has no checksum to keep (lld-link writes 0).
    pub fn set_pdb_id(&self, guid: &str, age: u32) {
        let mut bytes = std::fs::read(&self.exe).unwrap();
        let old = self.pdb_ref();
        let mut record = b"RSDS".to_vec();
        record.extend(guid_bytes(&old.id.guid));
        record.extend(old.id.age.to_le_bytes());
        let at: Vec<usize> = bytes
            .windows(record.len())
            .enumerate()
            .filter(|(_, w)| *w == record.as_slice())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 1, "one CodeView record in {}", self.exe.display());
        let new = [&guid_bytes(guid)[..], &age.to_le_bytes()].concat();
        bytes[at[0] + 4..at[0] + 24].copy_from_slice(&new);
        std::fs::write(&self.exe, bytes).unwrap();
        let r = self.pdb_ref();
        assert_eq!((r.id.guid.as_str(), r.id.age), (guid, age));
    }

    /// Puts the PDB into `store` in symbol-server layout (`<pdb>/<GUID><age>/<pdb>`);
    /// returns its path there.
    pub fn store_pdb(&self, store: &Path) -> PathBuf {
        let r = self.pdb_ref();
        let slot = store.join(&r.name).join(r.id.key());
        std::fs::create_dir_all(&slot).unwrap();
        std::fs::copy(&self.pdb, slot.join(&r.name)).unwrap();
        slot.join(&r.name)
    }
}

/// A GUID's 16 bytes as a CodeView record holds them, from its 32 hex digits in the
/// symbol-server order (Data1, Data2 and Data3 big-endian, then Data4's bytes).
fn guid_bytes(hex: &str) -> [u8; 16] {
    assert_eq!(hex.len(), 32, "a GUID: {hex}");
    let byte = |i: usize| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    let mut b: [u8; 16] = std::array::from_fn(byte);
    b[..4].reverse();
    b[4..6].reverse();
    b[6..8].reverse();
    b
}
