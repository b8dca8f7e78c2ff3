//! Saved profiles and what is made of them (issue 30, items 6, 7, 8 and 11): an inconsistent
//! profile.json is refused by report, compare and merge alike with status 2 and the field
//! named; out-of-range compare options are refused; guest text full of control characters
//! leaves every output parseable and the terminal free of escape sequences; merge refuses a
//! run given twice; compare says when the runs differ; numbers past 2^53 stay exact.
//!
//! The profiles are real ones: `hvprof profile` of the built-in reference guest (a short
//! run, well under a second here), then edited as JSON where a test needs a corruption.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{hvprof, status, Output, TempDir};

/// A generous bound that only proves "does not hang".
const LIMIT: Duration = Duration::from_secs(120);

use super::WORKLOAD;

/// What a hostile command line carries (a command line cannot carry NUL: the tests that need
/// one edit it into profile.json).
const HOSTILE: &str = "\x1b[31mred\x1b[0m </g></svg>& \"q\" | `tick` \u{fffe} \u{9b}2J \x07";

/// Two real profiles: `plain` and `hostile` (its command line carries [`HOSTILE`]).
struct Profiles {
    _dir: TempDir,
    plain: PathBuf,
    hostile: PathBuf,
}

fn profile(dir: &Path, name: &str, cmdline: &str) -> PathBuf {
    super::saved_run(dir, name, cmdline, &[])
}

fn profiles() -> &'static Profiles {
    static P: OnceLock<Profiles> = OnceLock::new();
    P.get_or_init(|| {
        let dir = TempDir::for_process("fault-profiles");
        let plain = profile(dir.path(), "plain", WORKLOAD);
        let hostile = profile(dir.path(), "hostile", &format!("{WORKLOAD} {HOSTILE}"));
        Profiles {
            _dir: dir,
            plain,
            hostile,
        }
    })
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn write_json(dir: &TempDir, name: &str, v: &Value) -> PathBuf {
    dir.write(name, v.to_string().as_bytes())
}

/// The index of the guest agent's object (counts in a 0x1000-byte range, symbolized).
fn guest_object(v: &Value) -> usize {
    v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o["owner"] == "guest")
        .expect("the reference guest's profile has a guest object")
}

/// Parses `path` with Python's XML parser (what CI systems and browsers are as strict as).
fn assert_xml_parses(path: &Path) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])",
        ])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3"));
    assert!(
        out.status.success(),
        "{} is not well-formed XML: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_no_escape(what: &str, text: &str, run: &Output) {
    assert!(
        !text.contains('\x1b') && !text.contains('\u{9b}') && !text.contains('\0'),
        "{what} carries a terminal control character\n{run}"
    );
}

/// Each corruption of item 7: the JSON edit, the field the error must name, and a word of
/// the problem.
type Corruption = (&'static str, fn(&mut Value), &'static str, &'static str);

fn corruptions() -> Vec<Corruption> {
    vec![
        (
            "count-2^64-1",
            |o| o["counts"][0][1] = u64::MAX.into(),
            "counts",
            "2^64-1",
        ),
        (
            "index-past-buckets",
            |o| {
                let last = o["counts"].as_array().unwrap().len() - 1;
                o["counts"][last][0] = "0x400".into();
            },
            "counts",
            "bucket index 0x400 past buckets 0x100",
        ),
        (
            "duplicate-index",
            |o| o["counts"][1][0] = o["counts"][0][0].clone(),
            "counts",
            "repeats",
        ),
        (
            "unsorted-indices",
            |o| o["counts"].as_array_mut().unwrap().swap(0, 1),
            "counts",
            "comes after",
        ),
        (
            "shift-64",
            |o| o["bucket_shift"] = 64.into(),
            "bucket_shift",
            "0 to 63",
        ),
        (
            "shift-200",
            |o| o["bucket_shift"] = 200.into(),
            "bucket_shift",
            "0 to 63",
        ),
        ("size-0", |o| o["size"] = "0x0".into(), "size", "0"),
        (
            "base-plus-size-overflows",
            |o| o["base"] = "0xffffffffffffff00".into(),
            "size",
            "passes the end",
        ),
        (
            "total-not-the-sum",
            |o| o["total"] = (o["total"].as_u64().unwrap() + 1).into(),
            "total",
            "is not the sum",
        ),
        (
            "functions-disagree",
            |o| {
                let f = &mut o["functions"][0]["samples"];
                *f = (f.as_u64().unwrap() + 1).into();
            },
            "functions",
            "not the total",
        ),
    ]
}

/// Item 7: every corruption refused by report, compare (either side) and merge, status 2,
/// with the file and the field named. Before the change all of these exited 0.
#[test]
fn inconsistent_profiles_are_refused_naming_the_field() {
    let p = profiles();
    let dir = TempDir::new("fault-profiles-corrupt");
    let good = read_json(&p.plain);
    let g = guest_object(&good);
    let mut cases: Vec<(PathBuf, String, &str)> = Vec::new();
    for (name, corrupt, field, problem) in corruptions() {
        let mut v = good.clone();
        corrupt(&mut v["objects"][g]);
        let path = write_json(&dir, &format!("{name}.json"), &v);
        cases.push((path, format!("objects[{g}].{field}"), problem));
    }
    // A string format_version was read as "version 0".
    let mut v = good.clone();
    v["format_version"] = "3".into();
    let path = write_json(&dir, "string-version.json", &v);
    cases.push((path, "format_version".into(), "is not an integer"));

    for (path, field, problem) in &cases {
        let file = path.to_str().unwrap();
        let plain = p.plain.to_str().unwrap();
        let merged = dir.join("merged.json");
        let runs = [
            hvprof(["report", file]).limit(LIMIT).run(),
            hvprof(["compare", plain, file]).limit(LIMIT).run(),
            hvprof(["compare", file, plain]).limit(LIMIT).run(),
            hvprof(["merge", "--out", merged.to_str().unwrap(), plain, file])
                .limit(LIMIT)
                .run(),
        ];
        for run in &runs {
            run.assert_status(status::USAGE);
            run.assert_error_line(&[file, &format!("{field}: "), problem]);
        }
        assert!(!merged.exists(), "nothing merged from {file}");
    }
}

/// Item 6: options that switched the regression check off are refused at parse time.
#[test]
fn out_of_range_compare_options_are_refused() {
    let p = profiles();
    let plain = p.plain.to_str().unwrap();
    for (option, value) in [
        ("--threshold", "nan"),
        ("--threshold", "inf"),
        ("--threshold", "-5"),
        ("--alpha", "nan"),
        ("--alpha", "0"),
        ("--alpha", "1"),
        ("--alpha", "2"),
        ("--min-points", "nan"),
    ] {
        let run = hvprof(["compare", plain, plain, &format!("{option}={value}")])
            .limit(LIMIT)
            .run();
        run.assert_status(status::USAGE);
        assert!(
            run.stderr.contains(option) && run.stderr.contains(value),
            "the error names {option} {value}\n{run}"
        );
    }
}

/// Item 8: guest text with NUL, ESC, a CSI sequence, markup, quotes, pipes, backticks and
/// noncharacters reaches report.txt, flamegraph.svg, the JUnit file and the terminal: every
/// output parses and no escape sequence reaches the terminal.
#[test]
fn hostile_guest_text_leaves_every_output_parseable() {
    let p = profiles();
    let dir = TempDir::new("fault-profiles-text");
    // NUL cannot come through a command line; put it, and the rest, into the text fields.
    let mut v = read_json(&p.hostile);
    let g = guest_object(&v);
    let cmdline = v["run"]["cmdline"].as_str().unwrap().to_string();
    assert!(cmdline.contains('\x1b'), "the guest kept its command line");
    v["run"]["cmdline"] = format!("{cmdline}\0nul").into();
    let name = format!("f\0{HOSTILE}\nnext line");
    v["objects"][g]["functions"][0]["name"] = name.clone().into();
    let hostile = write_json(&dir, "hostile.json", &v);

    let out = dir.join("report");
    let report = hvprof([
        "report",
        hostile.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .limit(LIMIT)
    .run();
    report.assert_status(0);
    assert_no_escape("report's stdout", &report.stdout, &report);
    assert_no_escape("report's stderr", &report.stderr, &report);
    assert_xml_parses(&out.join("flamegraph.svg"));
    assert_no_escape(
        "report.txt",
        &std::fs::read_to_string(out.join("report.txt")).unwrap(),
        &report,
    );
    // profile.json keeps the text exactly (serde escapes it) and still parses.
    let back = read_json(&out.join("profile.json"));
    assert_eq!(back["run"]["cmdline"], v["run"]["cmdline"]);

    // compare: the hostile profile against a plain one and against itself renamed, so that
    // its function names reach the Markdown and the JUnit file.
    let junit = dir.join("junit.xml");
    let markdown = dir.join("summary.md");
    let diff = dir.join("diff");
    let compare = hvprof([
        "compare",
        p.plain.to_str().unwrap(),
        hostile.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--markdown",
        markdown.to_str().unwrap(),
        "--out",
        diff.to_str().unwrap(),
    ])
    .limit(LIMIT)
    .run();
    assert!(
        matches!(compare.code(), Some(0 | 1)),
        "compare ran\n{compare}"
    );
    assert_no_escape("compare's stdout", &compare.stdout, &compare);
    assert_no_escape("compare's stderr", &compare.stderr, &compare);
    assert_xml_parses(&junit);
    assert_xml_parses(&diff.join("diff-flamegraph.svg"));
    let md = std::fs::read_to_string(&markdown).unwrap();
    assert_no_escape("the Markdown", &md, &compare);
    // The hostile name stays in one cell: as many unescaped `|` as in the header row.
    let cells = |l: &str| l.replace("\\|", "").matches('|').count();
    let header = md.lines().find(|l| l.starts_with("| | symbol")).unwrap();
    let row = md
        .lines()
        .find(|l| l.starts_with("| ") && l.contains("</svg>"))
        .unwrap_or_else(|| panic!("the hostile function has a row\n{md}"));
    assert_eq!(cells(row), cells(header), "{row}");
}

/// Item 11: one file given twice, or the same run under two names, is refused; runs of
/// another command line are refused; two real runs merge.
#[test]
fn merge_refuses_a_run_given_twice_and_other_configurations() {
    let p = profiles();
    let dir = TempDir::new("fault-profiles-merge");
    let plain = p.plain.to_str().unwrap();
    let merged = dir.join("merged.json");
    let out = merged.to_str().unwrap();
    let copy = dir.join("copy.json");
    std::fs::copy(&p.plain, &copy).unwrap();
    let twice = hvprof(["merge", "--out", out, plain, plain])
        .limit(LIMIT)
        .run();
    twice.assert_status(status::USAGE);
    twice.assert_error_line(&["the same file"]);
    let copied = hvprof(["merge", "--out", out, plain, copy.to_str().unwrap()])
        .limit(LIMIT)
        .run();
    copied.assert_status(status::USAGE);
    copied.assert_error_line(&["copy.json", "the same run as profile 1"]);
    let other = hvprof(["merge", "--out", out, plain, p.hostile.to_str().unwrap()])
        .limit(LIMIT)
        .run();
    other.assert_status(status::USAGE);
    other.assert_error_line(&["run.cmdline"]);
    assert!(!merged.exists());

    // A second run of the same workload merges.
    let rerun = profile(dir.path(), "rerun", WORKLOAD);
    hvprof(["merge", "--out", out, plain, rerun.to_str().unwrap()])
        .limit(LIMIT)
        .run()
        .assert_status(0);
    let m = read_json(&merged);
    assert_eq!(m["run"]["outcome"], "merged from 2 runs");
}

/// Item 11: compare of two kernels is allowed but said on stderr, in the Markdown and in the
/// JUnit file.
#[test]
fn compare_of_different_kernels_warns_everywhere() {
    let p = profiles();
    let dir = TempDir::new("fault-profiles-kernels");
    let mut v = read_json(&p.plain);
    v["run"]["kernel"] = "/builds/other-kernel.elf".into();
    let other = write_json(&dir, "other.json", &v);
    let junit = dir.join("junit.xml");
    let markdown = dir.join("summary.md");
    // Guest scope: a kernel that cannot be read here leaves the host profile's stack frames
    // named by address, which would not match the base's names.
    let run = hvprof([
        "compare",
        "--scope",
        "guest",
        p.plain.to_str().unwrap(),
        other.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--markdown",
        markdown.to_str().unwrap(),
    ])
    .limit(LIMIT)
    .run();
    run.assert_status(0);
    run.assert_stderr_contains("hvprof: warning: the profiles are of different runs: run.kernel");
    let md = std::fs::read_to_string(&markdown).unwrap();
    assert!(
        md.contains("**Warning:**") && md.contains("other-kernel.elf"),
        "{md}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("hvprof.warning") && xml.contains("other-kernel.elf"),
        "{xml}"
    );
    assert_xml_parses(&junit);
}

/// Item 11: the whole-space host profile's `buckets` (2^60) is written as a hex string, by
/// `profile` and by `merge`, and read back.
#[test]
fn buckets_past_2_53_are_written_as_strings() {
    let p = profiles();
    let host = |v: &Value| -> Value {
        v["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["owner"] == "host" && o["base"] == "0x0")
            .expect("a whole-space host profile")
            .clone()
    };
    let v = read_json(&p.plain);
    assert_eq!(host(&v)["buckets"], "0x1000000000000000");
    // A merged count past 2^53 is written as a string too, and read back exactly.
    let dir = TempDir::new("fault-profiles-big");
    let mut big = v.clone();
    let g = guest_object(&big);
    let o = &mut big["objects"][g];
    let first = o["counts"][0][1].as_u64().unwrap();
    let extra = (1u64 << 53) - first + 1;
    o["counts"][0][1] = format!("{:#x}", first + extra).into();
    o["total"] = format!("{:#x}", o["total"].as_u64().unwrap() + extra).into();
    o["functions"] = Value::Array(Vec::new());
    let big = write_json(&dir, "big.json", &big);
    let rerun = profile(dir.path(), "rerun", WORKLOAD);
    let merged = dir.join("merged.json");
    hvprof([
        "merge",
        "--out",
        merged.to_str().unwrap(),
        big.to_str().unwrap(),
        rerun.to_str().unwrap(),
    ])
    .limit(LIMIT)
    .run()
    .assert_status(0);
    let m = read_json(&merged);
    assert_eq!(host(&m)["buckets"], "0x1000000000000000");
    let total = &m["objects"][g]["total"];
    assert!(total.is_string(), "a total past 2^53 is a string: {total}");
    hvprof(["report", merged.to_str().unwrap()])
        .limit(LIMIT)
        .run()
        .assert_status(0);
}
