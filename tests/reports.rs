//! The report files of a real run: `hvprof demo --out DIR` on the reference guest's 1:2:4
//! workload writes profile.json, profile.pb.gz, flamegraph.svg and report.txt; `go tool pprof`
//! reads the pprof file and lists the workload's functions; `hvprof report --annotate`
//! reprints the saved profile with the hot code disassembled.
//!
//! The pprof check needs Go (Debian's `golang-go`); without it that test fails and says so.

use std::process::Command;

use crate::harness::{hvprof, TempDir};

const WORKLOAD: [&str; 3] = ["shares_f1", "shares_f2", "shares_f4"];

/// Runs the demo with `--out` into a fresh directory.
fn demo_out() -> TempDir {
    run_out(&["demo"])
}

/// Runs `hvprof <command...> --serial null --out DIR` into a fresh directory and checks that
/// the four report files are written.
fn run_out(command: &[&str]) -> TempDir {
    let dir = TempDir::new("reports");
    let mut args: Vec<&str> = command.to_vec();
    args.extend(["--serial", "null", "--out", dir.path().to_str().unwrap()]);
    let out = hvprof(args).run();
    out.assert_status(0);
    for f in [
        "profile.json",
        "profile.pb.gz",
        "flamegraph.svg",
        "report.txt",
    ] {
        out.assert_stderr_contains(&format!("hvprof: wrote {}", dir.join(f).display()));
        let len = std::fs::metadata(dir.join(f)).map_or(0, |m| m.len());
        assert!(len > 0, "{f} is written and not empty\n{out}");
    }
    dir
}

/// The `flat` column of `go tool pprof -top` for `function`.
fn flat(top: &str, function: &str) -> Option<u64> {
    top.lines()
        .find(|l| l.split_whitespace().last() == Some(function))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

/// `go tool pprof -top <options>` on DIR/profile.pb.gz: its stdout and stderr.
fn pprof_top(dir: &TempDir, options: &[&str]) -> (String, String) {
    crate::harness::pprof(dir.path(), "-top", options)
}

#[test]
fn go_tool_pprof_lists_the_workload_functions_in_cost_order() {
    let dir = demo_out();
    let (top, err) = pprof_top(&dir, &[]);
    let counts: Vec<u64> = WORKLOAD
        .iter()
        .map(|f| flat(&top, f).unwrap_or_else(|| panic!("{f} in pprof -top\n{top}\n{err}")))
        .collect();
    // Costs 1:2:4: each function takes more samples than the one before. Of n samples, f2's
    // lead over f1 is 0.143 n with a standard deviation of sqrt(0.408 n) (multinomial), so the
    // order holds by 0.22 sqrt(n) standard deviations (f4 over f2 by 0.32 sqrt(n)): 10 at the
    // ~2,000 samples of an idle run, 6.1 at the fewest seen under a parallel build (755).
    assert!(
        counts[0] < counts[1] && counts[1] < counts[2],
        "{counts:?}\n{top}"
    );
    assert!(top.contains("Type: samples"), "{top}");
}

/// Validates a profile.json against docs/profile.schema.json with Python's jsonschema.
fn validate_against_schema(json: &std::path::Path) {
    let schema = crate::harness::workspace_root().join("docs/profile.schema.json");
    let script = "import json, sys, jsonschema\n\
                  schema = json.load(open(sys.argv[1]))\n\
                  jsonschema.Draft202012Validator.check_schema(schema)\n\
                  jsonschema.validate(json.load(open(sys.argv[2])), schema)\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&schema)
        .arg(json)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run python3 ({e}): install python3 and python3-jsonschema")
        });
    assert!(
        out.status.success(),
        "profile.json does not match docs/profile.schema.json (needs python3-jsonschema):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_files_agree_and_a_saved_profile_reprints_with_annotation() {
    let dir = demo_out();
    let json = std::fs::read_to_string(dir.join("profile.json")).unwrap();
    let profile = report::read_profile(&dir.join("profile.json")).unwrap();
    assert_eq!(profile.format_version, report::profile::FORMAT_VERSION);
    let o = &profile.objects[0];
    let names: Vec<&str> = o.functions.iter().map(|f| f.name.as_str()).collect();
    // Cost order, by the margins of go_tool_pprof_lists_the_workload_functions_in_cost_order.
    assert_eq!(
        names[..3],
        ["shares_f4", "shares_f2", "shares_f1"],
        "{json}"
    );
    let sum: u64 = o.counts.iter().map(|(_, c)| *c).sum();
    assert_eq!(sum, o.total);

    validate_against_schema(&dir.join("profile.json"));

    let text = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    let svg = std::fs::read_to_string(dir.join("flamegraph.svg")).unwrap();
    for f in WORKLOAD {
        assert!(text.contains(&format!("refguest!{f}")), "{text}");
        assert!(svg.contains(f), "flamegraph names {f}");
    }

    let out = hvprof([
        "report",
        dir.join("profile.json").to_str().unwrap(),
        "--annotate",
        "--top",
        "3",
    ])
    .run();
    out.assert_status(0);
    out.assert_stdout_contains("refguest!shares_f4");
    // The hottest bucket is listed with its instructions, the ones starting inside it marked
    // with its count. Which bucket is hottest is up to sampling noise, and an instruction may
    // straddle its first byte, so look for any marked instruction inside it.
    let hot = o.counts.iter().max_by_key(|(_, c)| *c).unwrap();
    let start = o.base.0 + (hot.0 << o.bucket_shift);
    let end = start + (1u64 << o.bucket_shift);
    let marked = out.stdout.lines().any(|l| {
        l.strip_prefix('>')
            .map(str::split_whitespace)
            .and_then(|mut w| Some((w.next()?.parse::<u64>().ok()?, w.next()?)))
            .and_then(|(count, addr)| {
                let addr = u64::from_str_radix(addr.strip_prefix("0x")?, 16).ok()?;
                Some(count == hot.1 && (start..end).contains(&addr))
            })
            .unwrap_or(false)
    });
    assert!(
        marked,
        "an instruction of {start:#x}..{end:#x} marked with {}\n{out}",
        hot.1
    );
    assert!(!out.stdout.contains("(bad)"), "{out}");
}

/// A saved profile with the guest's processes and threads (vmm/report/testdata: 100 samples of
/// awk (pid 57, threads 57 `awk` and 60 `worker`), seq (pid 58) and an unidentified
/// `[cr3 0x5000]`; a unit test keeps it equal to the report crate's test profile): it
/// matches the schema, and `go tool pprof` lists its process and thread tags and keeps one
/// process's samples with `-tagfocus`.
#[test]
fn pprof_samples_are_tagged_with_the_guests_process_and_thread() {
    let fixture =
        crate::harness::workspace_root().join("vmm/report/testdata/profile-v4-processes.json");
    validate_against_schema(&fixture);
    let dir = TempDir::new("processes");
    let out = hvprof([
        "report",
        fixture.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ])
    .run();
    out.assert_status(0);
    out.assert_stdout_contains("Functions in awk (pid 57)");
    let (tags, err) = crate::harness::pprof(dir.path(), "-tags", &[]);
    for want in [
        "pid: Total 60",
        "process: Total 60",
        "50.0 (83.33%): awk",
        "10.0 (16.67%): seq",
        "thread: Total 60",
        "20.0 (33.33%): worker",
        "tid: Total 60",
        "scope: Total 65",
    ] {
        assert!(
            tags.contains(want),
            "{want:?} in pprof -tags\n{tags}\n{err}"
        );
    }
    // Without symbols frames are named by address. awk's stacks: 30 samples at 0x1074 (called
    // from 0x1050), 20 at 0x1044; seq's: 10 at 0x1074.
    let (top, err) = pprof_top(&dir, &["-tagfocus=process=awk"]);
    assert_eq!(
        (flat(&top, "0x1074"), flat(&top, "0x1044")),
        (Some(30), Some(20)),
        "{top}\n{err}"
    );
    assert!(top.contains("Showing nodes accounting for 50,"), "{top}");
    let (top, err) = pprof_top(&dir, &["-tagfocus=process=seq"]);
    assert_eq!(
        (flat(&top, "0x1074"), flat(&top, "0x1044")),
        (Some(10), None),
        "{top}\n{err}"
    );
}

#[test]
fn report_refuses_a_file_that_is_not_a_profile() {
    let dir = TempDir::new("not-a-profile");
    let path = dir.write("x.json", b"{\"format\": \"something else\"}");
    let out = hvprof(["report", path.to_str().unwrap()]).run();
    out.assert_status(crate::harness::status::USAGE);
    out.assert_error_line(&["x.json", "not an hvprof profile"]);
}

/// True when `text` holds `(name.rs:N)` for some file name and line N > 0.
fn has_source_line(text: &str) -> bool {
    text.split('(').skip(1).any(|s| {
        s.split_once(')')
            .and_then(|(inside, _)| inside.split_once(".rs:"))
            .and_then(|(_, n)| n.parse::<u32>().ok())
            .is_some_and(|n| n > 0)
    })
}

#[test]
fn kernel_samples_carry_source_lines_from_the_guests_dwarf() {
    // The reference guest's kernel is Rust with line tables (its CPL3 workload is assembly
    // without them): a host-side profile of CPL0 names file:line for its hot buckets, in
    // report.txt, in `report --annotate` and in the pprof file.
    let dir = run_out(&["profile", "--cpl", "0", "--quiet"]);
    let text = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    let host = text
        .split("profile object")
        .find(|s| s.contains("(host)"))
        .unwrap_or_else(|| panic!("a host object in report.txt\n{text}"));
    let hottest = host.split("Hottest buckets").nth(1).unwrap_or_default();
    assert!(has_source_line(hottest), "{text}");

    let annotated = hvprof([
        "report",
        dir.join("profile.json").to_str().unwrap(),
        "--annotate",
    ])
    .run();
    annotated.assert_status(0);
    assert!(
        annotated.stdout.lines().any(|l| l
            .trim()
            .split_once(".rs:")
            .is_some_and(|(_, n)| n.parse::<u32>().is_ok())),
        "a source line row in the listing\n{annotated}"
    );

    let (top, _) = pprof_top(&dir, &["-lines", "-nodefraction=0"]);
    assert!(
        top.lines()
            .any(|l| l.contains("images/refguest/src/") && l.contains(".rs:")),
        "pprof -lines shows the guest's source files\n{top}"
    );
}
