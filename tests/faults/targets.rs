//! What stands at an output's path, and what a directory holds from before: an output never
//! replaces a device or a FIFO (a device is written through as `> /dev/null` writes it, a
//! FIFO nobody reads is refused without blocking), is never one of its command's inputs
//! (by device and inode, whatever the name), and leaves none of an earlier run's files to
//! be read as the new one's: stale timeline files, a timeline beside a merged profile,
//! temporaries of a killed writer. Inputs of no accepted format are refused from their
//! first bytes, whatever their size.
//!
//! The device nodes are the test's own, made in a scratch directory (root: as the suite runs
//! in CI), never the system's.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::harness::{hvprof, status, TempDir};

/// Two saved profiles of the reference guest, each with its timeline.
struct Runs {
    _dir: TempDir,
    r1: PathBuf,
    r2: PathBuf,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = TempDir::for_process("targets-runs");
        let [r1, r2] =
            ["r1", "r2"].map(|n| super::saved_run(dir.path(), n, super::WORKLOAD, &["--timeline"]));
        Runs { r1, r2, _dir: dir }
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `hvprof profile` of the built-in guest with `--guest-types types`, into `out`.
fn profile_with_types(types: &Path, out: &Path) -> crate::harness::Output {
    hvprof([
        "profile",
        "--serial",
        "null",
        "--guest-types",
        s(types),
        "--out",
        s(out),
    ])
    .run()
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// A character device of the null device's numbers, the test's own node in `dir`.
fn null_node(dir: &TempDir) -> PathBuf {
    let p = dir.join("null");
    // SAFETY: a valid NUL-terminated path; mknod makes one node and touches nothing else.
    let r = unsafe {
        libc::mknod(
            c_path(&p).as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 3),
        )
    };
    assert_eq!(r, 0, "mknod {} (the suite runs as root)", p.display());
    p
}

/// A FIFO nobody reads, in `dir`.
fn fifo(dir: &TempDir, name: &str) -> PathBuf {
    let p = dir.join(name);
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path(&p).as_ptr(), 0o600) }, 0);
    p
}

fn kind(p: &Path) -> std::fs::FileType {
    std::fs::symlink_metadata(p).unwrap().file_type()
}

/// Every command that writes a file the user names, writing to `target`.
fn named_outputs(target: &Path) -> Vec<Vec<String>> {
    let r = runs();
    let (r1, r2, t) = (s(&r.r1), s(&r.r2), s(target));
    [
        vec!["report", r1, "--perf-script", t],
        vec!["report", r1, "--fxprof", t],
        vec!["compare", r1, r2, "--markdown", t],
        vec!["compare", r1, r2, "--junit", t],
        vec!["merge", "-o", t, r1, r2],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect()
}

#[test]
fn a_device_named_as_an_output_is_written_through_and_stays_a_device() {
    let dir = TempDir::new("targets-device");
    let null = null_node(&dir);
    for args in named_outputs(&null) {
        let out = hvprof(&args).run();
        assert!(matches!(out.code(), Some(0 | 1)), "{args:?}\n{out}");
        assert!(
            kind(&null).is_char_device(),
            "{args:?} replaced the device\n{out}"
        );
    }
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["null"],
        "nothing else was written beside the device"
    );
}

#[test]
fn a_fifo_nobody_reads_is_refused_at_once_and_stays_a_fifo() {
    let dir = TempDir::new("targets-fifo");
    let f = fifo(&dir, "out");
    for args in named_outputs(&f) {
        let out = hvprof(&args).limit(Duration::from_secs(60)).run();
        out.assert_status(status::USAGE);
        out.assert_error_line(&[s(&f), "a FIFO nobody reads"]);
        assert!(kind(&f).is_fifo(), "{args:?}");
    }
    // A FIFO at the name of one of --out's files: refused before anything is read.
    let out_dir = TempDir::new("targets-fifo-out");
    let report_txt = fifo(&out_dir, "report.txt");
    let out = hvprof(["report", s(&runs().r1), "--out", s(out_dir.path())]).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["report.txt", "a FIFO nobody reads"]);
    assert!(kind(&report_txt).is_fifo());
    assert!(
        !out_dir.join("profile.json").exists(),
        "written before the refusal"
    );
    // The same at the end of a run: the user's to mend (status 2), and none of the set is
    // put in place.
    let out = hvprof([
        "profile",
        "--cmdline",
        super::WORKLOAD,
        "--out",
        s(out_dir.path()),
        "--quiet",
        "--serial",
        "null",
    ])
    .limit(super::RUN_LIMIT)
    .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["report.txt", "a FIFO nobody reads"]);
    assert!(kind(&report_txt).is_fifo());
    assert!(
        !out_dir.join("profile.json").exists(),
        "written beside the refusal"
    );
}

#[test]
fn an_output_that_is_one_of_the_inputs_is_refused_and_the_input_kept() {
    let dir = TempDir::new("targets-same");
    let d = dir.join("run");
    std::fs::create_dir(&d).unwrap();
    let r = runs();
    for f in ["profile.json", "timeline.json"] {
        std::fs::copy(r.r1.with_file_name(f), d.join(f)).unwrap();
    }
    let profile = d.join("profile.json");
    let linked = dir.join("hard-link.json");
    std::fs::hard_link(&profile, &linked).unwrap();
    let before = std::fs::read(&profile).unwrap();
    let timeline_before = std::fs::read(d.join("timeline.json")).unwrap();
    let dotted = d.join(".").join("profile.json");
    let timeline = d.join("timeline.json");
    let cases: Vec<Vec<&str>> = vec![
        vec!["report", s(&profile), "--perf-script", s(&profile)],
        vec!["report", s(&profile), "--perf-script", s(&dotted)],
        vec!["report", s(&profile), "--fxprof", s(&linked)],
        vec!["report", s(&profile), "--perf-script", s(&timeline)],
        vec!["report", s(&profile), "--out", s(&d)],
        vec!["compare", s(&profile), s(&r.r2), "--junit", s(&linked)],
        vec!["merge", "-o", s(&dotted), s(&profile), s(&r.r2)],
    ];
    for args in cases {
        let out = hvprof(&args).run();
        out.assert_status(status::USAGE);
        out.assert_error_line(&["an input of this command"]);
        assert_eq!(std::fs::read(&profile).unwrap(), before, "{args:?}");
        assert_eq!(
            std::fs::read(d.join("timeline.json")).unwrap(),
            timeline_before,
            "{args:?}"
        );
    }
}

#[test]
fn a_run_without_a_timeline_leaves_none_of_the_previous_runs_timeline_files() {
    let dir = TempDir::new("targets-stale");
    let json = super::saved_run(dir.path(), "d", super::WORKLOAD, &["--timeline"]);
    let out = json.parent().unwrap().to_path_buf();
    for f in ["timeline.json", "timeline.fxprof.json", "timeline.perf.txt"] {
        assert!(out.join(f).exists(), "{f}");
    }
    super::saved_run(dir.path(), "d", super::WORKLOAD, &[]);
    let mut names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "flamegraph.svg",
            "profile.json",
            "profile.pb.gz",
            "report.txt"
        ]
    );
}

#[test]
fn merge_leaves_no_timeline_of_an_earlier_profile_beside_its_output() {
    let dir = TempDir::new("targets-merge");
    let r = runs();
    let d = dir.join("r3");
    std::fs::create_dir(&d).unwrap();
    for f in [
        "profile.json",
        "timeline.json",
        "timeline.fxprof.json",
        "timeline.perf.txt",
    ] {
        std::fs::copy(r.r1.with_file_name(f), d.join(f)).unwrap();
    }
    let merged = d.join("profile.json");
    hvprof(["merge", "-o", s(&merged), s(&r.r1), s(&r.r2)])
        .run()
        .assert_status(0);
    for f in ["timeline.json", "timeline.fxprof.json", "timeline.perf.txt"] {
        assert!(
            !d.join(f).exists(),
            "{f} of an earlier run is still beside the merge"
        );
    }
    let out = hvprof(["report", s(&merged), "--timeline"]).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["no timeline"]);
}

#[test]
fn temporaries_of_a_killed_writer_are_removed_at_the_next_write_and_nothing_else() {
    let dir = TempDir::new("targets-leftovers");
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    // Pids of reaped children: no process has them (unless one was reused at once, which
    // the last assertion allows for).
    let dead: Vec<u32> = (0..2)
        .map(|_| {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            let pid = c.id();
            c.wait().unwrap();
            pid
        })
        .collect();
    let leftovers = [
        format!(".profile.json.{}.0.part", dead[0]),
        format!(".report.txt.{}.3.part", dead[1]),
    ];
    let kept = ["notes.part", ".notes.part", "keep.json"];
    for n in leftovers.iter().map(String::as_str).chain(kept) {
        std::fs::write(out.join(n), b"x").unwrap();
    }
    hvprof(["report", s(&runs().r1), "--out", s(&out)])
        .run()
        .assert_status(0);
    for n in kept {
        assert!(out.join(n).exists(), "{n} was removed");
    }
    for (n, pid) in leftovers.iter().zip(&dead) {
        // SAFETY: signal 0 sends nothing.
        let reused = unsafe { libc::kill(i32::try_from(*pid).unwrap(), 0) } == 0;
        assert!(reused || !out.join(n).exists(), "{n} is still there");
    }
}

/// An ISF file given with --guest-types that breaks the schema is refused before the run,
/// status 2, naming the file and where in it.
#[test]
fn an_isf_file_that_breaks_the_schema_is_refused_naming_where() {
    let dir = TempDir::new("targets-isf");
    let types = dir.join("ntkrnlmp.json");
    std::fs::write(
        &types,
        r#"{"metadata": {"format": "6.1.0", "producer": {"name": "x", "version": "1.0.0"},
            "windows": {}}, "base_types": {}, "enums": {}, "symbols": {},
            "user_types": {"_EPROCESS": {"kind": "struct", "size": 2624,
                "fields": {"Peb": {"offset": "1360", "type": {"kind": "function"}}}}}}"#,
    )
    .unwrap();
    let out = profile_with_types(&types, &dir.join("out"));
    out.assert_status(status::USAGE);
    out.assert_error_line(&[
        "ntkrnlmp.json",
        "ISF: user_types._EPROCESS.fields.Peb.offset",
    ]);
}

/// The largest resident set of any child this test process has waited for, in bytes.
fn children_max_rss() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_CHILDREN with a valid pointer.
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    assert_eq!(r, 0);
    u64::try_from(ru.ru_maxrss).unwrap() * 1024
}

#[test]
fn a_huge_input_of_no_accepted_format_is_refused_from_its_first_bytes() {
    let dir = TempDir::new("targets-sniff");
    // Sparse: gigabytes of zeros that cost the disk nothing, within each input's limit.
    let types = dir.join("types.bin");
    std::fs::File::create(&types)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let symbols = dir.join("symbols.bin");
    std::fs::File::create(&symbols)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let out = profile_with_types(&types, &dir.join("out"));
    out.assert_status(status::USAGE);
    out.assert_error_line(&["types.bin", "not a PDB, an ELF file, BTF or ISF"]);
    let out = hvprof(["report", s(&runs().r1), "--symbols", s(&symbols)]).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["symbols.bin", "not an ELF or PE image, nor a PDB"]);
    // Reading either whole would have taken gigabytes.
    let rss = children_max_rss();
    assert!(rss < 512 << 20, "a child reached {rss} bytes");
}
