//! Call stacks walked at sample time, read back the way users read them (`go tool pprof
//! -traces`): the reference guest's frame-pointer call tree (`scenario=stacks`) and a PE
//! module without frame pointers (`scenario=pestacks`, tests/fixtures/pe/stacks.c built here
//! with clang and lld-link), whose frames only its unwind data describes.
//!
//! Both trees spend all their time in one leaf reached by three paths costing 1 : 2 : 4. What
//! the walk must get right is each sample's path: nearly every sample (all but those in the
//! leaf's own prologue and epilogue) must be on one of the three, complete to the process
//! entry, none truncated. How the samples divide between the paths is the workload's timing
//! on the host: run alone, the shares are within 2.3 points of 1/7, 2/7, 4/7 (docs/stacks.md),
//! but with other guests running beside it a path of the PE tree was seen 7 points off
//! (pe_b's leaf at 33.5 %). So the shares are held only to within a factor of 1.5 of their
//! costs and to their order, which a walk that loses or mislabels a frame breaks (a lost
//! caller moves a whole path's samples elsewhere) and host load does not.
//!
//! Needs Debian's `golang-go`, `clang`, `lld` and `llvm` (llvm-readobj).

use std::path::Path;
use std::process::Command;

use crate::harness::{hvprof, pprof, pprof_traces, TempDir};

/// A caller->leaf path (leaf first, up to the round function) and its cost weight.
type Path3 = (&'static [&'static str], u64);

const FP_PATHS: [Path3; 3] = [
    (&["stacks_leaf", "stacks_a", "stacks_round"], 1),
    (&["stacks_leaf", "stacks_b", "stacks_round"], 2),
    (
        &["stacks_leaf", "stacks_mid", "stacks_c", "stacks_round"],
        4,
    ),
];

const PE_PATHS: [Path3; 3] = [
    (&["pe_leaf", "pe_a", "pe_round"], 1),
    (&["pe_leaf", "pe_b", "pe_round"], 2),
    (&["pe_leaf", "pe_mid", "pe_c", "pe_round"], 4),
];

/// `go tool pprof -traces` as (function names innermost first, samples), one per trace.
fn traces(text: &str) -> Vec<(Vec<String>, u64)> {
    pprof_traces(text)
        .into_iter()
        .map(|t| (t.frames, t.count))
        .collect()
}

/// Profiles the reference guest running `cmdline` (with `--initrd module` if given) for its
/// CPL3 call stacks; returns the output directory.
fn profile(cmdline: &str, module: Option<&Path>) -> TempDir {
    let dir = TempDir::new("stacks");
    let out = dir.join("out");
    let mut args: Vec<String> = [
        "profile",
        "--cmdline",
        cmdline,
        "--cpl",
        "3",
        "--interval",
        "10000",
        "--quiet",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(out.display().to_string());
    if let Some(m) = module {
        args.extend(["--initrd".to_string(), m.display().to_string()]);
    }
    hvprof(&args)
        .run()
        .assert_status(0)
        .assert_stdout_contains("refguest: PASS");
    dir
}

/// Checks the traces in `dir`/`sub` against `paths`; returns the measured shares.
fn check_paths(dir: &TempDir, paths: &[Path3; 3], root: &str) -> Vec<f64> {
    let (text, _) = pprof(&dir.join(root), "-traces", &[]);
    let traces = traces(&text);
    let total: u64 = traces.iter().map(|(_, n)| n).sum();
    assert!(
        total >= 300,
        "too few samples to judge shares: {total}\n{text}"
    );
    assert!(
        !text.contains("truncated:"),
        "every walk reaches the outermost frame\n{text}"
    );
    let weight: u64 = paths.iter().map(|(_, w)| w).sum();
    let mut shares = Vec::new();
    let mut on_paths = 0;
    for (path, w) in paths {
        let n: u64 = traces
            .iter()
            .filter(|(names, _)| {
                names.len() > path.len()
                    && names.starts_with(&path.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            })
            .map(|(_, n)| n)
            .sum();
        on_paths += n;
        let share = n as f64 / total as f64;
        let ideal = *w as f64 / weight as f64;
        assert!(
            share >= ideal / 1.5 && share <= ideal * 1.5,
            "{path:?}: share {share:.4}, cost share {ideal:.4}, over {total} samples\n{text}"
        );
        shares.push(share);
    }
    assert!(
        shares[0] < shares[1] && shares[1] < shares[2],
        "the paths' shares follow their costs: {shares:?}\n{text}"
    );
    // Samples in the leaf's prologue or epilogue may miss a frame; nearly all must not.
    assert!(
        on_paths * 100 >= total * 98,
        "{on_paths} of {total} samples on the three paths\n{text}"
    );
    shares
}

#[test]
fn frame_pointer_stacks_show_each_path_at_its_cost_share() {
    let dir = profile("scenario=stacks stacks.ms=3000", None);
    let shares = check_paths(&dir, &FP_PATHS, "out");
    eprintln!("frame-pointer path shares: {shares:.4?}");
    // The flame graph folds the same stacks: the callers are in it.
    let svg = std::fs::read_to_string(dir.join("out/flamegraph.svg")).unwrap();
    for f in [
        "stacks_round",
        "stacks_mid",
        "stacks_c",
        "stacks_b",
        "stacks_a",
        "stacks_leaf",
    ] {
        assert!(svg.contains(f), "flamegraph.svg names {f}");
    }
    let text = std::fs::read_to_string(dir.join("out/report.txt")).unwrap();
    assert!(text.contains("called by refguest!stacks_mid"), "{text}");
}

pub(crate) use crate::harness::pe::PeModule;

/// Builds tests/fixtures/pe/stacks.c into `dir`/stacks.exe and stacks.pdb, linked at
/// 0x40300000 (the reference guest's PE window).
pub(crate) fn build_pe(dir: &TempDir) -> PeModule {
    build_pe_with(dir, &[])
}

/// [`build_pe`] with more lld-link arguments (`/export:pe_round` gives the image an export
/// directory, and so the name `stacks.exe` in guest memory).
pub(crate) fn build_pe_with(dir: &TempDir, link: &[&str]) -> PeModule {
    let spec = crate::harness::pe::PeSpec {
        source: "stacks.c",
        image: "stacks.exe",
        pdb: "stacks.pdb",
        entry: "pe_round",
        base: 0x4030_0000,
        link,
        cflags: &[],
    };
    PeModule::build(dir, &spec)
}

/// The unwind codes `llvm-readobj --unwind` finds in `exe`.
fn unwind_codes(exe: &Path) -> String {
    let out = Command::new("llvm-readobj")
        .arg("--unwind")
        .arg(exe)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run llvm-readobj ({e}): install Debian's llvm (apt-get install -y llvm)")
        });
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn pe_stacks_without_frame_pointers_unwind_from_their_unwind_data() {
    let dir = TempDir::new("pestacks-build");
    let pe = build_pe(&dir);
    let unwind = unwind_codes(&pe.exe);
    // The prologues exercise these codes (the walk must handle every one of them to reach
    // pe_round), and pe_leaf has no unwind data at all.
    for code in [
        "PUSH_NONVOL",
        "ALLOC_SMALL",
        "ALLOC_LARGE",
        "SAVE_XMM128",
        "SET_FPREG",
    ] {
        assert!(unwind.contains(code), "the module needs {code}\n{}", unwind);
    }
    let run = profile("scenario=pestacks stacks.ms=3000", Some(&pe.exe));
    // Symbols found after the run: `report --out` rewrites the four files with the PDB.
    let profile_json = run.join("out/profile.json");
    hvprof([
        "report",
        profile_json.to_str().unwrap(),
        "--symbols",
        pe.exe.to_str().unwrap(),
        "--symbol-path",
        dir.path().to_str().unwrap(),
        "--out",
        run.join("named").to_str().unwrap(),
    ])
    .run()
    .assert_status(0);
    let shares = check_paths(&run, &PE_PATHS, "named");
    eprintln!("x64-unwind path shares: {shares:.4?}");
    let svg = std::fs::read_to_string(run.join("named/flamegraph.svg")).unwrap();
    for f in ["pe_round", "pe_mid", "pe_c", "pe_b", "pe_a", "pe_leaf"] {
        assert!(svg.contains(f), "flamegraph.svg names {f}");
    }
}

/// The module is found in guest memory with the PDB its CodeView record names, and a symbol
/// directory in symbol-server layout holding only that PDB names its functions: no
/// `--symbols`, no load address given. Through the deprecated `--symbol-dir`, which still
/// works (tests/symserver.rs covers `--symbol-path`).
#[test]
fn a_module_found_in_guest_memory_is_named_from_a_symbol_directory() {
    let dir = TempDir::new("pestacks-symdir");
    let pe = build_pe(&dir);
    let r = pe.pdb_ref();
    let store = dir.join("store");
    pe.store_pdb(&store);
    let out = dir.join("out");
    crate::symserver::profile(&pe, &out, &["--symbol-dir", store.to_str().unwrap()])
        .run()
        .assert_status(0)
        .assert_stderr_contains("--symbol-dir is deprecated; use --symbol-path");
    let profile = report::read_profile(&out.join("profile.json")).unwrap();
    let m = profile
        .guest_modules
        .iter()
        .find(|m| m.base.0 == 0x4030_0000)
        .unwrap_or_else(|| panic!("the module is listed: {:?}", profile.guest_modules));
    let pdb = m.pdb.as_ref().expect("with its PDB");
    assert_eq!(
        (pdb.name.as_str(), pdb.guid.as_str(), pdb.age),
        (r.name.as_str(), r.id.guid.as_str(), r.id.age)
    );
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("stacks!pe_leaf"), "{text}");
}
