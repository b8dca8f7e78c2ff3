//! PE and PDB symbolization on a DLL and PDB produced here: tests/fixtures/pe/tiny.c compiled
//! with `clang --target=x86_64-pc-windows-msvc -gcodeview` and linked with
//! `lld-link /dll /debug /pdb:... /map:...`. The linker's map file is the independent truth
//! for every function's RVA.
//!
//! Needs Debian's `clang` and `lld` (for `lld-link`); without them the tests fail and say so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::harness::{tool, TempDir};
use report::symbols::{pdb, pe, Finder, SymbolPath};
use report::Symbols;

/// A finder searching one plain directory.
fn dir(path: &Path) -> Finder {
    Finder::new(SymbolPath::from_dir(path))
}

/// The DLL, its PDB and the linker's map.
struct Built {
    _dir: TempDir,
    dll: PathBuf,
    pdb: PathBuf,
    /// name -> RVA from the map file.
    map: BTreeMap<String, u64>,
    /// The preferred load address from the map file.
    image_base: u64,
}

/// Reads `Rva+Base` of every public and static symbol from an lld-link /map file.
fn parse_map(text: &str) -> (u64, BTreeMap<String, u64>) {
    let mut base = 0;
    let mut map = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("Preferred load address is ") {
            base = u64::from_str_radix(rest.trim(), 16).unwrap();
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 4 && f[0].starts_with("0001:") && f[3].ends_with(".obj") {
            let va = u64::from_str_radix(f[2], 16).unwrap();
            map.insert(f[1].to_string(), va - base);
        }
    }
    (base, map)
}

/// The DLL's C source.
fn tiny_c() -> PathBuf {
    crate::harness::workspace_root().join("tests/fixtures/pe/tiny.c")
}

fn build() -> Built {
    let dir = TempDir::new("pdb");
    let src = tiny_c();
    let obj = dir.join("tiny.obj");
    let dll = dir.join("tiny.dll");
    let pdb = dir.join("tiny.pdb");
    let map = dir.join("tiny.map");
    let os = |s: &str| std::ffi::OsString::from(s);
    tool(
        "clang",
        "clang",
        &[
            &os("--target=x86_64-pc-windows-msvc"),
            &os("-g"),
            &os("-gcodeview"),
            &os("-O1"),
            &os("-c"),
            src.as_os_str(),
            &os("-o"),
            obj.as_os_str(),
        ],
    );
    let arg = |flag: &str, p: &Path| os(&format!("{flag}{}", p.display()));
    tool(
        "lld-link",
        "lld",
        &[
            &os("/dll"),
            &os("/debug"),
            &os("/noentry"),
            &os("/nodefaultlib"),
            &arg("/pdb:", &pdb),
            &arg("/out:", &dll),
            &arg("/map:", &map),
            obj.as_os_str(),
        ],
    );
    let (image_base, map) = parse_map(&std::fs::read_to_string(&map).unwrap());
    for f in ["hv_alpha", "hv_beta", "hv_gamma", "hv_delta"] {
        assert!(map.contains_key(f), "the map file names {f}: {map:?}");
    }
    Built {
        _dir: dir,
        dll,
        pdb,
        map,
        image_base,
    }
}

fn rva_of(symbols: &Symbols, name: &str) -> Option<(u64, u64)> {
    let m = &symbols.modules()[0];
    m.symbols
        .iter()
        .find(|s| s.name == name)
        .map(|s| (s.rva, s.size))
}

#[test]
fn a_pdb_alone_names_every_function_at_its_rva() {
    let b = build();
    let bytes = std::fs::read(&b.pdb).unwrap();
    let symbols = Symbols::from_pdb(&bytes, "tiny.pdb").unwrap();
    for (name, rva) in &b.map {
        let (found, size) = rva_of(&symbols, name).unwrap_or_else(|| panic!("{name} in the PDB"));
        assert_eq!(found, *rva, "{name}'s RVA");
        assert!(size > 0, "{name} is a procedure with a size");
    }
    let module = symbols.modules()[0]
        .clone()
        .placed_at(0xffff_f800_1000_0000);
    let placed = Symbols::from_module(module);
    let beta = b.map["hv_beta"];
    assert_eq!(
        placed.describe_qualified(0xffff_f800_1000_0000 + beta + 2),
        "tiny.pdb!hv_beta+0x2"
    );
}

/// The 1-based lines of tiny.c that define `name`: from its signature to its closing brace.
fn defining_lines(name: &str) -> std::ops::RangeInclusive<u32> {
    let text = std::fs::read_to_string(tiny_c()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.contains(&format!(" {name}(int x) {{")))
        .unwrap_or_else(|| panic!("tiny.c defines {name}"));
    let last = (first..lines.len())
        .find(|&i| lines[i].trim_end().ends_with('}'))
        .unwrap();
    let n = |i: usize| u32::try_from(i + 1).unwrap();
    n(first)..=n(last)
}

/// Checks that every byte of each function the map file names maps to a line of its
/// definition in tiny.c, and that the multi-line one spans several lines.
fn check_lines(symbols: &Symbols, base: u64, b: &Built) {
    for (name, rva) in &b.map {
        let (_, size) = rva_of(symbols, name).unwrap();
        let want = defining_lines(name);
        let mut seen = std::collections::BTreeSet::new();
        for off in 0..size {
            let hit = symbols.resolve(base + rva + off).unwrap();
            let line = hit
                .source()
                .unwrap_or_else(|| panic!("{name}+{off:#x} has a source line"));
            assert!(line.file.ends_with("tiny.c"), "{name}: {line:?}");
            assert!(
                want.contains(&line.line),
                "{name}+{off:#x}: {line:?} not in {want:?}"
            );
            assert_eq!(line.short(), format!("tiny.c:{}", line.line));
            seen.insert(line.line);
        }
        if want.start() != want.end() {
            assert!(seen.len() > 1, "{name} spans lines {want:?}, saw {seen:?}");
        }
    }
}

#[test]
fn a_pdb_gives_each_function_its_source_lines() {
    let b = build();
    let bytes = std::fs::read(&b.pdb).unwrap();
    let symbols = Symbols::from_pdb(&bytes, "tiny.pdb").unwrap();
    assert!(!symbols.modules()[0].lines.is_empty());
    check_lines(&symbols, 0, &b);
    // Through the PE and its symbol directory, at the image's base.
    let dll = std::fs::read(&b.dll).unwrap();
    let symdir = b.pdb.parent().unwrap();
    let from_pe = Symbols::from_pe(&dll, "tiny.dll", Some(&mut dir(symdir))).unwrap();
    check_lines(&from_pe, b.image_base, &b);
    // Without the PDB, the exports have no lines.
    let empty = TempDir::new("nolines");
    let bare = Symbols::from_pe(&dll, "tiny.dll", Some(&mut dir(empty.path()))).unwrap();
    assert!(bare.modules()[0].lines.is_empty());
}

#[test]
fn a_pe_finds_its_pdb_in_a_flat_symbol_directory() {
    let b = build();
    let bytes = std::fs::read(&b.dll).unwrap();
    let symdir = b.pdb.parent().unwrap();
    let symbols = Symbols::from_pe(&bytes, "tiny.dll", Some(&mut dir(symdir))).unwrap();
    let m = &symbols.modules()[0];
    assert_eq!(m.base, b.image_base);
    for (name, rva) in &b.map {
        assert_eq!(rva_of(&symbols, name).map(|s| s.0), Some(*rva), "{name}");
    }
    let gamma = b.image_base + b.map["hv_gamma"];
    assert_eq!(symbols.describe_qualified(gamma), "tiny.dll!hv_gamma");
    let r = pe::pdb_ref(&bytes).unwrap().expect("a CodeView record");
    assert_eq!(r.name, "tiny.pdb");
    assert_eq!(m.debug_id.as_deref(), Some(r.id.key().as_str()));
    assert!(m.code_at(gamma).is_some(), "code bytes for annotation");
}

#[test]
fn a_pe_finds_its_pdb_in_the_symbol_server_layout_and_ignores_a_stale_one() {
    let b = build();
    let bytes = std::fs::read(&b.dll).unwrap();
    let r = pe::pdb_ref(&bytes).unwrap().unwrap();
    let server = TempDir::new("symsrv");
    let nested = server.path().join("tiny.pdb").join(r.id.key());
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::copy(&b.pdb, nested.join("tiny.pdb")).unwrap();
    let srv = SymbolPath::parse(&format!("srv*{}", server.path().display()), None).unwrap();
    assert_eq!(
        Finder::new(srv).find_pdb("tiny.dll", &r.name, &r.id),
        Some(nested.join("tiny.pdb"))
    );
    let symbols = Symbols::from_pe(&bytes, "tiny.dll", Some(&mut dir(server.path()))).unwrap();
    assert!(
        rva_of(&symbols, "hv_gamma").is_some(),
        "static function from the PDB"
    );

    // A PDB with another GUID, or the same GUID and another age, is not used (only the
    // exports remain), even where the file sits in the slot of the identity looked for.
    let pdb_id = pdb::id(&std::fs::read(&b.pdb).unwrap()).unwrap();
    assert_eq!(pdb_id, r.id, "the DBI age is the one the PE records");
    for stale in [
        pdb::PdbId {
            guid: "0".repeat(32),
            ..r.id.clone()
        },
        pdb::PdbId {
            age: r.id.age + 1,
            ..r.id.clone()
        },
    ] {
        let slot = server.path().join("tiny.pdb").join(stale.key());
        std::fs::create_dir_all(&slot).unwrap();
        std::fs::copy(&b.pdb, slot.join("tiny.pdb")).unwrap();
        let mut f = dir(server.path());
        assert_eq!(
            f.find_pdb("tiny.dll", "tiny.pdb", &stale),
            None,
            "{stale:?}"
        );
        assert_eq!(f.missing().len(), 1);
    }
}

#[test]
fn without_a_pdb_only_the_exports_are_named() {
    let b = build();
    let bytes = std::fs::read(&b.dll).unwrap();
    let empty = TempDir::new("nosym");
    let symbols = Symbols::from_pe(&bytes, "tiny.dll", Some(&mut dir(empty.path()))).unwrap();
    assert_eq!(
        rva_of(&symbols, "hv_alpha").map(|s| s.0),
        Some(b.map["hv_alpha"])
    );
    assert_eq!(
        rva_of(&symbols, "hv_beta").map(|s| s.0),
        Some(b.map["hv_beta"])
    );
    assert_eq!(
        rva_of(&symbols, "hv_gamma"),
        None,
        "static functions are not exported"
    );
}
