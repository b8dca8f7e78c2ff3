//! The stand-in kernel of the ntprocs test laid out as real Windows kernels are, named from
//! their public symbol tables alone.
//!
//! tests/fixtures/pe/windows_builds.json holds, for a few real builds of ntoskrnl, what their
//! public Volatility 3 symbol tables (ISF files of JPCERTCC/Windows-Symbol-Tables, made from
//! Microsoft's ntkrnlmp.pdb) say of the structures hvprof reads and the symbols it needs:
//! sizes, member offsets, symbol RVAs and the PDB's CodeView identity
//! (tests/fixtures/pe/windows_builds.py writes it from those files and checks it against
//! them). For each build, tests/fixtures/pe/ntproc.c is built with that build's offsets
//! (NTPROC_LAYOUT), PsActiveProcessHead, PsLoadedModuleList and PsInitialSystemProcess at the
//! build's RVAs, and the build's GUID and age in its CodeView record; the build's tables are
//! written out as an ISF file. hvprof, given that file and no PDB (`--guest-types`, then as a
//! symbol pack on `--symbol-path`, found by the kernel's identity: a directory tree for two
//! builds, a zipped pack as Volatility ships them for the third), must name every process,
//! thread and user module with the guest's own shares, as the PDB-driven test does.
//!
//! Only the layouts, RVAs and identities are real: the code is the stand-in's, and no real
//! Windows kernel has run.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use super::{ntprocs, NT_BASE};
use crate::harness::pe::{PeModule, PeSpec};
use crate::harness::TempDir;

/// The facts of the build `key` (its `key` in windows_builds.json).
fn facts(key: &str) -> Value {
    let path = crate::harness::workspace_root().join("tests/fixtures/pe/windows_builds.json");
    let table: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    table["builds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["key"] == key)
        .unwrap_or_else(|| panic!("no build {key} in {}", path.display()))
        .clone()
}

/// The symbols the stand-in defines at the build's RVAs, with their sizes (two LIST_ENTRYs and
/// a pointer). The others the layout reads, KiSystemCall64 and KiSystemCall64Shadow, are code
/// the stand-in does not have: hvprof reads their RVAs and uses neither.
const PLACED: [(&str, u64); 3] = [
    ("PsActiveProcessHead", 16),
    ("PsLoadedModuleList", 16),
    ("PsInitialSystemProcess", 8),
];

/// A number of the facts table.
fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("a number: {v}"))
}

/// The RVA of the build's symbol `name`.
fn rva(build: &Value, name: &str) -> u64 {
    num(&build["symbols"][name]["address"])
}

/// The build's ISF file: its tables under metadata naming its PDB, as Volatility 3 writes
/// one (only the structures, members and symbols of windows_builds.json are in it).
fn isf(build: &Value) -> Vec<u8> {
    let isf = json!({
        "metadata": {
            "format": build["format"],
            "producer": {"name": "hvprof-tests", "version": "1.0.0"},
            "windows": {"pdb": build["pdb"]},
        },
        "base_types": build["base_types"],
        "user_types": build["user_types"],
        "enums": {},
        "symbols": build["symbols"],
    });
    serde_json::to_vec_pretty(&isf).unwrap()
}

/// ntproc.c's NTPROC_LAYOUT for `build`: `STRUCT_MEMBER` offsets and `STRUCT_SIZE` sizes (the
/// names of ntproc.h), `SYMBOL_NAME` RVAs, and where the section holding the symbols begins
/// (`real_rva`) and ends.
fn layout_header(build: &Value, real_rva: u64) -> String {
    let mut h = format!(
        "/* {}, written by tests/ntkernel/real_builds.rs */\n",
        build["name"]
    );
    for (name, ty) in build["user_types"].as_object().unwrap() {
        let name = name.trim_start_matches('_').to_uppercase();
        writeln!(h, "#define {name}_SIZE {:#x}", num(&ty["size"])).unwrap();
        for (member, field) in ty["fields"].as_object().unwrap() {
            let member = member.to_uppercase();
            writeln!(h, "#define {name}_{member} {:#x}", num(&field["offset"])).unwrap();
        }
    }
    for (name, symbol) in build["symbols"].as_object().unwrap() {
        let name = name.to_uppercase();
        writeln!(h, "#define SYMBOL_{name} {:#x}", num(&symbol["address"])).unwrap();
    }
    let end = PLACED.iter().map(|&(s, size)| rva(build, s) + size).max();
    writeln!(h, "#define KI_REAL_RVA {real_rva:#x}").unwrap();
    writeln!(h, "#define KI_REAL_END {:#x}", end.unwrap()).unwrap();
    h
}

/// The RVA and virtual size of the image's section `name`.
fn section(exe: &Path, name: &str) -> Option<(u64, u64)> {
    let b = std::fs::read(exe).unwrap();
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let nt = usize::try_from(u32_at(0x3c)).unwrap();
    let table = nt + 24 + u16_at(nt + 20);
    (0..u16_at(nt + 6)).map(|i| table + 40 * i).find_map(|s| {
        let n = &b[s..s + 8];
        let len = n.iter().position(|&c| c == 0).unwrap_or(8);
        (&n[..len] == name.as_bytes()).then(|| (u32_at(s + 12).into(), u32_at(s + 8).into()))
    })
}

/// Builds ntproc.c at `build`'s layout into `dir` as ntoskrnl.exe (with its own PDB, which
/// hvprof is never given), its symbols at the build's RVAs and its CodeView record naming
/// the build's ntkrnlmp.pdb.
///
/// The symbols are defined in a zero-filled section, .kreal, that lld-link places after the
/// image's others: a first link finds where it begins, the second defines each symbol at its
/// RVA's distance from there.
fn build_stand_in(dir: &TempDir, build: &Value) -> PeModule {
    let include = format!("-I{}", dir.path().display());
    let link = |real_rva: u64| {
        std::fs::write(dir.join("ntlayout.h"), layout_header(build, real_rva)).unwrap();
        let spec = PeSpec {
            source: "ntproc.c",
            image: "ntoskrnl.exe",
            pdb: "ntkrnlmp.pdb",
            entry: "KiSystemStartup",
            base: NT_BASE,
            link: &["/pdbaltpath:ntkrnlmp.pdb"],
            cflags: &[&include, "-DNTPROC_LAYOUT=\"ntlayout.h\""],
        };
        let nt = PeModule::build(dir, &spec);
        let (at, _) = section(&nt.exe, ".kreal").expect("a .kreal section");
        (nt, at)
    };
    let first = PLACED.iter().map(|&(s, _)| rva(build, s)).min().unwrap();
    let (_, real_rva) = link(first & !0xfff);
    let (nt, again) = link(real_rva);
    assert_eq!(again, real_rva, "the second link moved .kreal");
    let pdb = &build["pdb"];
    nt.set_pdb_id(
        pdb["GUID"].as_str().unwrap(),
        u32::try_from(num(&pdb["age"])).unwrap(),
    );
    nt
}

/// Runs the ntprocs scenario on the stand-in at build `key`'s layout, named from the build's
/// ISF file alone: given with `--guest-types`, then found in a symbol pack on `--symbol-path`
/// by the kernel's CodeView identity.
fn named_from_its_isf_alone(key: &str, form: PackForm) {
    let build = facts(key);
    let dir = TempDir::new(&format!("ntbuild-{key}"));
    let nt = build_stand_in(&dir, &build);
    let json = isf(&build);

    // The stand-in is laid out as the ISF says: its own PDB (clang's types of ntproc.c, and
    // lld-link's publics) gives hvprof the same layout. The system-call entries are the one
    // difference: the ISF has the build's, the stand-in has no such code.
    let from_isf = match report::symbols::types::isf::layout(&json).unwrap() {
        introspect::os::OsLayout::Windows(l) => l,
        other => panic!("a Windows layout: {other:?}"),
    };
    let mut from_pdb =
        report::symbols::types::pdb::windows_layout(&std::fs::read(&nt.pdb).unwrap()).unwrap();
    assert_eq!(from_pdb.symbols.ki_system_call64, None);
    from_pdb.symbols.ki_system_call64 = from_isf.symbols.ki_system_call64;
    from_pdb.symbols.ki_system_call64_shadow = from_isf.symbols.ki_system_call64_shadow;
    assert_eq!(from_pdb, from_isf, "{}", build["name"]);
    assert_eq!(
        u64::from(from_isf.symbols.ps_active_process_head),
        rva(&build, "PsActiveProcessHead")
    );
    // No PDB anywhere hvprof might look.
    std::fs::remove_file(&nt.pdb).unwrap();

    let file = dir.write("ntkrnlmp.json", &json);
    let pack = dir.join("pack");
    let member = format!(
        "windows/ntkrnlmp.pdb/{}-{}.json",
        build["pdb"]["GUID"].as_str().unwrap(),
        build["pdb"]["age"]
    );
    match form {
        PackForm::Tree => {
            let in_pack = pack.join("symbols").join(&member);
            std::fs::create_dir_all(in_pack.parent().unwrap()).unwrap();
            std::fs::write(&in_pack, &json).unwrap();
        }
        PackForm::Zipped => zip_with_python(&pack.join("symbols/windows.zip"), &member, &file),
    }
    ntprocs(
        &nt,
        &dir.join("out-file"),
        ["--guest-types", file.to_str().unwrap()],
    );
    ntprocs(
        &nt,
        &dir.join("out-pack"),
        ["--symbol-path", pack.to_str().unwrap()],
    );
}

/// How the symbol pack holds the build's ISF file.
enum PackForm {
    /// `symbols/windows/ntkrnlmp.pdb/<GUID>-<AGE>.json`.
    Tree,
    /// The same path, `windows/` on, in a deflated `symbols/windows.zip`, as Volatility ships
    /// its packs.
    Zipped,
}

/// Writes `file` as the one deflated member `member` of a new zip archive at `archive`, with
/// Python's zipfile: another writer than the zip crate hvprof reads with.
fn zip_with_python(archive: &Path, member: &str, file: &Path) {
    std::fs::create_dir_all(archive.parent().unwrap()).unwrap();
    let script = "import sys, zipfile\n\
                  with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n\
                  \x20   z.write(sys.argv[3], sys.argv[2])\n";
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(archive)
        .arg(member)
        .arg(file)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "python3 zipfile: {status}");
}

#[test]
fn windows_server_2019_17763_is_named_from_its_public_isf_alone() {
    named_from_its_isf_alone("17763", PackForm::Tree);
}

#[test]
fn windows_10_22h2_19045_is_named_from_its_public_isf_alone() {
    named_from_its_isf_alone("19045", PackForm::Tree);
}

#[test]
fn windows_11_21h2_22000_is_named_from_its_public_isf_alone_and_from_a_zipped_pack() {
    named_from_its_isf_alone("22000", PackForm::Zipped);
}
