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

use crate::harness::pe::{PeModule, PeSpec};
use crate::harness::{hvprof, pprof, TempDir};

const NT_BASE: u64 = 0xffff_f800_0010_0000;

/// Builds the stand-in kernel (ntoskrnl.exe) and its PDB (ntkrnlmp.pdb) in `dir`.
fn build_nt(dir: &TempDir) -> PeModule {
    let spec = PeSpec {
        source: "nt.c",
        image: "ntoskrnl.exe",
        pdb: "ntkrnlmp.pdb",
        entry: "KiSystemStartup",
        base: NT_BASE,
        link: &[],
    };
    PeModule::build(dir, &spec)
}

#[test]
fn the_kernel_and_its_module_list_are_found_and_named_from_the_pdb_alone() {
    let dir = TempDir::new("ntkernel");
    let nt = build_nt(&dir);
    let r = nt.pdb_ref();
    let store = dir.join("store");
    nt.store_pdb(&store);
    let out = dir.join("out");
    hvprof([
        "profile",
        "--cmdline",
        "scenario=ntkernel nt.ms=1000",
        "--cpus",
        "1",
        "--quiet",
        "--initrd",
        nt.exe.to_str().unwrap(),
        "--symbol-path",
        store.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .run()
    .assert_status(0);

    // Every module on the list, in kernel space; the kernel with its PDB's identity.
    let profile = report::read_profile(&out.join("profile.json")).unwrap();
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
