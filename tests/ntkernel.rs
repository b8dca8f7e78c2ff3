//! A Windows kernel found from outside: tests/fixtures/pe/nt.c, a stand-in ntoskrnl built here
//! with clang and lld-link, runs at CPL0 in the reference guest (`scenario=ntkernel`) and builds
//! its loaded-module list the way Windows does (KLDR_DATA_TABLE_ENTRY as 64-bit Windows 10 and
//! 11 lay it out). hvprof, given only the PDB's store, finds the kernel from its samples,
//! PsLoadedModuleList from its exports, every module on the list, and names the kernel's
//! functions from the PDB its CodeView record names.
//!
//! This is a layout-level test: the list is laid out as Windows lays it out and is walked by
//! the code that would walk a real ntoskrnl's, but no real Windows kernel has been read.
//!
//! Needs Debian's `clang`, `lld` and `golang-go`.

use std::path::{Path, PathBuf};

use crate::harness::{hvprof, pprof, tool, TempDir};

const NT_BASE: u64 = 0xffff_f800_0010_0000;

/// Builds the stand-in kernel and its PDB in `dir`; returns the image's path.
fn build_nt(dir: &TempDir) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pe/nt.c");
    let obj = dir.join("nt.obj");
    let exe = dir.join("ntoskrnl.exe");
    let os = |s: String| std::ffi::OsString::from(s);
    tool(
        "clang",
        "clang",
        &[
            os("--target=x86_64-pc-windows-msvc".into()),
            os("-O2".into()),
            os("-g".into()),
            os("-gcodeview".into()),
            os("-c".into()),
            src.into_os_string(),
            os("-o".into()),
            obj.clone().into_os_string(),
        ],
    );
    tool(
        "lld-link",
        "lld",
        &[
            os("/entry:KiSystemStartup".into()),
            os("/subsystem:native".into()),
            os("/fixed".into()),
            os(format!("/base:{NT_BASE:#x}")),
            os("/nodefaultlib".into()),
            os("/debug".into()),
            os(format!("/pdb:{}", dir.join("ntkrnlmp.pdb").display())),
            os(format!("/out:{}", exe.display())),
            obj.into_os_string(),
        ],
    );
    exe
}

#[test]
fn the_kernel_and_its_module_list_are_found_and_named_from_the_pdb_alone() {
    let dir = TempDir::new("ntkernel");
    let exe = build_nt(&dir);
    let r = analysis::symbols::pe::pdb_ref(&std::fs::read(&exe).unwrap())
        .unwrap()
        .expect("the kernel names its PDB");
    let store = dir.join("store");
    let slot = store.join(&r.name).join(r.id.key());
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::copy(dir.join("ntkrnlmp.pdb"), slot.join(&r.name)).unwrap();
    let out = dir.join("out");
    hvprof([
        "profile",
        "--cmdline",
        "scenario=ntkernel nt.ms=1000",
        "--cpus",
        "1",
        "--quiet",
        "--initrd",
        exe.to_str().unwrap(),
        "--symbol-dir",
        store.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .run()
    .assert_status(0);

    // Every module on the list, in kernel space; the kernel with its PDB's identity.
    let profile = analysis::read_profile(&out.join("profile.json")).unwrap();
    let listed: Vec<(&str, u64, u64, Option<u32>)> = profile
        .guest_modules
        .iter()
        .map(|m| {
            assert_eq!(m.process.0, None, "{} is in kernel space", m.name);
            (
                m.name.as_str(),
                m.base.0,
                m.size.0,
                m.pdb.as_ref().map(|p| p.age),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("ntoskrnl.exe", NT_BASE, 0x5000, Some(r.id.age)),
            ("hal.dll", 0xffff_f800_00a0_0000, 0x6000, None),
            ("hvprof.sys", 0xffff_f800_0120_0000, 0x9000, None),
        ],
        "{:?}",
        profile.guest_modules
    );
    let pdb = profile.guest_modules[0].pdb.as_ref().unwrap();
    assert_eq!(
        (pdb.name.as_str(), pdb.guid.as_str()),
        (r.name.as_str(), r.id.guid.as_str())
    );

    // KiIdleSpin is not exported: only the PDB names it.
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("ntoskrnl.exe!KiIdleSpin"), "{text}");
    assert!(
        text.contains("hvprof.sys"),
        "the module table lists the driver\n{text}"
    );
    let (top, _) = pprof(&out, "-top", &[]);
    assert!(top.contains("KiIdleSpin"), "{top}");
}
