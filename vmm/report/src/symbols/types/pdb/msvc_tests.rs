//! The PDB reader on real MSVC-written PDBs (testdata/msvc-pdb; its README names their sources
//! and licences): every complete structure, class and union with a field list is read as the
//! layout code reads it ([`PdbTypes::structure_at`], the code behind [`PdbTypes::record`]) and
//! compared member by member with `llvm-pdbutil dump -types` (Debian's `llvm`; without it the
//! test fails and says so): names, offsets, bitfield positions and widths, sizes, base classes
//! (read inline at their offsets), anonymous members (read inline), named member types
//! resolved by unique name as llvm-pdbutil resolves forward references. None of the MSVC
//! fixtures has a field list long enough for `LF_INDEX`: the stand-in kernel's PDB (clang and
//! lld-link, tests.rs) has three, and goes through the same comparison.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;

use super::*;
use crate::symbols::types::field;

mod pdbutil;

use pdbutil::{Entry, Type};

/// What the comparison went through, to show the fixtures cover what they are for.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    structures: usize,
    members: usize,
    bitfields: usize,
    bases: usize,
    virtual_bases: usize,
    anonymous: usize,
    forward: usize,
    nested: usize,
    methods: usize,
    continuations: usize,
}

/// What a member's type should read as.
enum Want {
    /// A named structure: its key and llvm-pdbutil's definition of it (`None`: none in the PDB).
    Named(String, Option<u32>),
    /// An anonymous structure or union, read inline: its definition.
    Anon(u32),
    Other,
}

struct Check<'c, 't> {
    types: &'c mut PdbTypes<'t>,
    dump: &'c HashMap<u32, Type>,
    /// Unique names that have a complete definition.
    unique: HashSet<String>,
    errors: Vec<String>,
    cov: Coverage,
}

/// A CodeView primitive type's size (the spec's `T_*` numbers), `None` if not known here.
fn primitive(ti: u32) -> Option<u64> {
    match (ti >> 8) & 0xf {
        0 => {}
        1 => return Some(2),
        2..=4 => return Some(4),
        5 => return Some(6),
        6 => return Some(8),
        7 => return Some(16),
        _ => return None,
    }
    Some(match ti & 0xff {
        0x03 => 0,
        0x10 | 0x20 | 0x30 | 0x68 | 0x69 | 0x70 | 0x7c => 1,
        0x11 | 0x21 | 0x31 | 0x46 | 0x71 | 0x72 | 0x73 | 0x7a => 2,
        0x08 | 0x12 | 0x22 | 0x32 | 0x40 | 0x74 | 0x75 | 0x7b => 4,
        0x13 | 0x23 | 0x33 | 0x41 | 0x76 | 0x77 => 8,
        0x42 => 10,
        0x14 | 0x24 | 0x43 | 0x78 | 0x79 => 16,
        _ => return None,
    })
}

impl Check<'_, '_> {
    fn composite_size(&self, ti: u32) -> u64 {
        match self.dump.get(&ti) {
            Some(Type::Composite { size, .. }) => *size,
            _ => 0,
        }
    }

    /// A member type's size (`None`: not checked), bits and kind, as llvm-pdbutil shows it.
    fn want(&mut self, mut ti: u32) -> (Option<u64>, Option<(u8, u8)>, Want) {
        let mut bits = None;
        for _ in 0..MAX_DEPTH {
            if ti < 0x1000 {
                return (primitive(ti), bits, Want::Other);
            }
            match self.dump.get(&ti) {
                Some(Type::Modifier(r)) => ti = *r,
                Some(Type::Enum(u)) => ti = *u,
                Some(Type::Bitfield(t, position, width)) => {
                    bits = Some((*position, *width));
                    ti = *t;
                }
                Some(Type::Pointer(size)) => return (size.map(u64::from), bits, Want::Other),
                Some(Type::Array(size)) => return (Some(*size), bits, Want::Other),
                Some(Type::Composite {
                    name,
                    unique,
                    forward,
                    definition,
                    size,
                    ..
                }) => {
                    let def = if *forward { *definition } else { Some(ti) };
                    if *forward && def.is_some() {
                        self.cov.forward += 1;
                    }
                    let size = def.map_or(*size, |d| self.composite_size(d));
                    if anonymous(name) {
                        return match def {
                            Some(d) => (Some(size), bits, Want::Anon(d)),
                            None => (Some(size), bits, Want::Other),
                        };
                    }
                    let key = match unique {
                        Some(u) if self.unique.contains(u) => u.clone(),
                        _ => name.clone(),
                    };
                    return (Some(size), bits, Want::Named(key, def));
                }
                other => {
                    self.errors
                        .push(format!("type {ti:#x}: unexpected member type {other:?}"));
                    return (None, bits, Want::Other);
                }
            }
        }
        (None, bits, Want::Other)
    }

    /// The field list's members and bases in order, through its continuations.
    fn entries(&mut self, mut list: u32) -> Vec<Entry> {
        let mut out = Vec::new();
        let (mut nested, mut methods) = (false, false);
        for _ in 0..=MAX_CONTINUATIONS {
            let Some(Type::Fields(entries)) = self.dump.get(&list) else {
                self.errors.push(format!("{list:#x} is not a field list"));
                break;
            };
            let mut next = None;
            for e in entries {
                match e {
                    Entry::Member { .. } | Entry::Base { .. } => out.push(e.clone()),
                    Entry::Continue(c) => next = Some(*c),
                    Entry::Other(leaf) => match leaf.as_str() {
                        "LF_NESTTYPE" => nested = true,
                        "LF_ONEMETHOD" | "LF_METHOD" => methods = true,
                        "LF_VBCLASS" | "LF_IVBCLASS" => self.cov.virtual_bases += 1,
                        _ => {}
                    },
                }
            }
            let Some(c) = next else { break };
            self.cov.continuations += 1;
            list = c;
        }
        self.cov.nested += usize::from(nested);
        self.cov.methods += usize::from(methods);
        out
    }

    /// Compares hvprof's `got` with the complete structure `ti` of the dump.
    fn compare(&mut self, got: &Record, ti: u32, path: &str, depth: usize) {
        let Some(Type::Composite { size, fields, .. }) = self.dump.get(&ti).cloned() else {
            self.errors
                .push(format!("{path}: {ti:#x} is not a structure"));
            return;
        };
        if u64::from(got.size) != size {
            self.errors
                .push(format!("{path}: size {} read, {size} in the PDB", got.size));
        }
        let want = fields.map(|f| self.entries(f)).unwrap_or_default();
        if got.members.len() != want.len() {
            let names: Vec<&str> = got.members.iter().map(|m| m.name.as_str()).collect();
            self.errors.push(format!(
                "{path}: {} members read ({names:?}), {} in the PDB ({want:?})",
                got.members.len(),
                want.len()
            ));
            return;
        }
        for (m, w) in got.members.iter().zip(want) {
            let (name, ty, offset, base) = match w {
                Entry::Member { name, ty, offset } => (name, ty, offset, false),
                Entry::Base { ty, offset } => (String::new(), ty, offset, true),
                _ => unreachable!("entries keeps members and bases"),
            };
            let at = format!("{path}.{}", if base { "<base>" } else { &name });
            if m.name != name || u64::from(m.field.offset) != offset {
                self.errors.push(format!(
                    "{at}: read as {:?} at {}, in the PDB at {offset}",
                    m.name, m.field.offset
                ));
                continue;
            }
            let (size, bits, kind) = self.want(ty);
            if let Some(size) = size.filter(|s| u64::from(m.field.size) != *s) {
                self.errors.push(format!(
                    "{at}: size {} read, {size} in the PDB",
                    m.field.size
                ));
            }
            if m.field.bits != bits {
                self.errors.push(format!(
                    "{at}: bits {:?} read, {bits:?} in the PDB",
                    m.field.bits
                ));
            }
            self.cov.members += usize::from(!base);
            self.cov.bases += usize::from(base);
            self.cov.bitfields += usize::from(bits.is_some());
            self.member_type(m, kind, base, &at, depth);
        }
    }

    /// Checks a member's kind: an inline record (base or anonymous) is compared in turn; a
    /// named structure must resolve to what llvm-pdbutil resolved it to.
    fn member_type(&mut self, m: &Member, kind: Want, base: bool, at: &str, depth: usize) {
        match (kind, &m.ty) {
            (Want::Named(_, Some(def)), Ty::Anon(inner)) if base => {
                self.compare(inner, def, at, depth + 1);
            }
            (Want::Named(_, None), Ty::Other) if base => {}
            (Want::Anon(def), Ty::Anon(inner)) if !base => {
                self.cov.anonymous += 1;
                self.compare(inner, def, at, depth + 1);
            }
            (Want::Named(key, def), Ty::Named(k)) if !base && *k == key => {
                let read = match self.types.record(k) {
                    Ok(r) => r,
                    Err(e) => return self.errors.push(format!("{at}: {k}: {e}")),
                };
                let wanted = def.map(|d| self.types.structure_at(d));
                match (read, wanted) {
                    (None, None) => {}
                    (Some(r), Some(Ok(Some(w)))) if *r == w => {}
                    (r, w) => self.errors.push(format!(
                        "{at}: {k} resolves to {:?}, the PDB's definition {def:?} reads as {:?}",
                        r.map(|r| r.size),
                        w.map(|w| w.ok().flatten().map(|w| w.size)),
                    )),
                }
            }
            (Want::Other, Ty::Other) => {}
            (_, ty) => self.errors.push(format!(
                "{at}: read as {}, not what the PDB has",
                match ty {
                    Ty::Named(n) => format!("named {n}"),
                    Ty::Anon(_) => "inline".into(),
                    Ty::Other => "other".into(),
                }
            )),
        }
    }
}

/// Compares every complete structure of `bytes` with llvm-pdbutil's dump of it.
fn compare_with_pdbutil(name: &str, bytes: &[u8]) -> Coverage {
    let path = std::env::temp_dir().join(format!("hvprof-msvc-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let dump = pdbutil::dump(&path);
    let _ = std::fs::remove_file(&path);

    let mut pdb = pdb::PDB::open(Cursor::new(bytes)).unwrap();
    let (errors, cov) = with_types(&mut pdb, |types| {
        let unique = dump
            .values()
            .filter_map(|t| match t {
                Type::Composite {
                    unique: Some(u),
                    forward: false,
                    ..
                } => Some(u.clone()),
                _ => None,
            })
            .collect();
        let mut check = Check {
            types,
            dump: &dump,
            unique,
            errors: Vec::new(),
            cov: Coverage::default(),
        };
        let mut complete: Vec<(u32, String)> = dump
            .iter()
            .filter_map(|(&ti, t)| match t {
                Type::Composite {
                    name,
                    forward: false,
                    fields: Some(_),
                    ..
                } => Some((ti, name.clone())),
                _ => None,
            })
            .collect();
        complete.sort();
        for (ti, sname) in complete {
            check.cov.structures += 1;
            match check.types.structure_at(ti) {
                Ok(Some(rec)) => check.compare(&rec, ti, &format!("{sname} ({ti:#x})"), 0),
                other => check
                    .errors
                    .push(format!("{sname} ({ti:#x}): read as {other:?}")),
            }
        }
        Ok((check.errors, check.cov))
    })
    .unwrap();
    assert!(
        errors.is_empty(),
        "{name}: hvprof and llvm-pdbutil disagree in {} places:\n{}",
        errors.len(),
        errors[..errors.len().min(40)].join("\n")
    );
    assert!(cov.structures > 0 && cov.members > 0, "{name}: {cov:?}");
    cov
}

/// The uncompressed bytes of testdata/msvc-pdb/`name`.
pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/msvc-pdb")
        .join(format!("{name}.gz"));
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut bytes)
        .unwrap();
    bytes
}

const FIXTURES: [&str; 6] = [
    "CrashWithException.pdb",
    "big-read.pdb",
    "every-type.pdb",
    "ClassLayoutTest.pdb",
    "ComplexPaddingTest.pdb",
    "SimplePaddingTest.pdb",
];

#[test]
fn msvc_pdbs_read_as_llvm_pdbutil_reads_them() {
    let mut total = Coverage::default();
    for name in FIXTURES {
        let c = compare_with_pdbutil(name, &fixture(name));
        total.structures += c.structures;
        total.members += c.members;
        total.bitfields += c.bitfields;
        total.bases += c.bases;
        total.virtual_bases += c.virtual_bases;
        total.anonymous += c.anonymous;
        total.forward += c.forward;
        total.nested += c.nested;
        total.methods += c.methods;
    }
    // What the fixtures are for: each kind of record was met (counts as of the fixtures here).
    let t = total;
    assert!(
        t.structures > 400 && t.members > 1000 && t.anonymous > 0,
        "{t:?}"
    );
    assert!(
        t.bitfields >= 5 && t.bases > 100 && t.virtual_bases > 0,
        "{t:?}"
    );
    assert!(
        t.forward > 100 && t.nested > 100 && t.methods > 100,
        "{t:?}"
    );
}

#[test]
fn msvc_structures_are_found_by_name_and_by_unique_name() {
    let bytes = fixture("ClassLayoutTest.pdb");
    let a = structure(&bytes, "BitFieldTest::A").unwrap().unwrap();
    let names: Vec<_> = a.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["Bits1", "Bits2", "Bits3", "Bits4", "Bits22", "Offset0x04"]
    );
    assert_eq!(a.members[4].field.bits, Some((10, 22)));
    assert_eq!(a.members[5].field.offset, 4);
    let by_unique = structure(&bytes, ".?AUA@BitFieldTest@@").unwrap().unwrap();
    assert_eq!(a, by_unique);
    assert_eq!(structure(&bytes, "NoSuchStructure").unwrap(), None);
}

#[test]
fn the_stand_in_pdbs_continued_field_lists_read_as_llvm_pdbutil_reads_them() {
    let (bytes, _) = super::tests::ntproc("pdbutil");
    let c = compare_with_pdbutil("ntproc.pdb", &bytes);
    assert!(
        c.continuations >= 3 && c.bitfields > 0 && c.anonymous > 0,
        "{c:?}"
    );
}

#[test]
fn x86_primitive_pointers_are_four_bytes() {
    // `char *name` is T_32PRCHAR (0x0470), a primitive pointer: it was read as 8 bytes.
    let bytes = fixture("big-read.pdb");
    let e = structure(&bytes, "_exception").unwrap().unwrap();
    let name = e.members.iter().find(|m| m.name == "name").unwrap();
    assert_eq!((name.field.offset, name.field.size), (4, 4));
}

#[test]
fn members_of_a_base_class_are_found_at_the_base_s_offset() {
    let bytes = fixture("CrashWithException.pdb");
    let exception = structure(&bytes, "std::exception").unwrap().unwrap();
    let data = exception
        .members
        .iter()
        .find(|m| m.name == "_Data")
        .unwrap();
    let bad_alloc = structure(&bytes, "std::bad_alloc").unwrap().unwrap();
    let base = &bad_alloc.members[0];
    assert_eq!((base.name.as_str(), base.field.offset), ("", 0));
    assert_eq!(base.ty, Ty::Anon(exception.clone()));
    let mut pdb = pdb::PDB::open(Cursor::new(&bytes[..])).unwrap();
    let found = with_types(&mut pdb, |t| field(t, "std::bad_alloc", "_Data._DoFree")).unwrap();
    let what = with_types(&mut pdb, |t| field(t, "__std_exception_data", "_DoFree")).unwrap();
    assert_eq!(
        found.map(|f| f.offset),
        Some(base.field.offset + data.field.offset + what.unwrap().offset)
    );
}
