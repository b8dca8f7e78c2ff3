//! Saved runs with a timeline under hostile edits (issue 40, items 1, 4, 11 and 13): a
//! window compares the host profile of the timeline's id, not the guest agent's object of the
//! same id; a timeline.json past what hvprof records is refused naming the limit, and no
//! export is written from it; bidi and separator characters reach no text output; a key given
//! twice in profile.json or timeline.json is refused naming it.
//!
//! One real run, `hvprof profile --timeline` of the built-in reference guest, edited as JSON
//! where a test needs it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{hvprof, status, TempDir};

/// A generous bound that only proves "does not hang".
const LIMIT: Duration = Duration::from_secs(120);

/// The run: its directory (profile.json and timeline.json).
struct Run {
    _dir: TempDir,
    out: PathBuf,
}

fn run() -> &'static Run {
    static R: OnceLock<Run> = OnceLock::new();
    R.get_or_init(|| {
        let dir = TempDir::for_process("fault-timelines");
        let json = super::saved_run(dir.path(), "p", super::WORKLOAD, &["--timeline"]);
        let out = json.parent().unwrap().to_path_buf();
        assert!(out.join("timeline.json").exists());
        Run { _dir: dir, out }
    })
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A copy of the run in `dir/name` with its profile.json and timeline.json as given (text).
fn copy(dir: &TempDir, name: &str, profile: &str, timeline: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("profile.json"), profile).unwrap();
    std::fs::write(d.join("timeline.json"), timeline).unwrap();
    d.join("profile.json")
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Item 1: the run has a guest agent object 1 and a host profile 1; a window of it compares
/// the host profile.
#[test]
fn a_window_compares_the_host_profile_beside_an_agent_object_of_its_id() {
    let p = run().out.join("profile.json");
    let v = read_json(&p);
    let ids: Vec<(String, u64)> = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["owner"].as_str().unwrap().to_string(),
                o["id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        ids.contains(&("guest".into(), 1)) && ids.contains(&("host".into(), 1)),
        "{ids:?}"
    );
    let p = p.to_str().unwrap();
    for window in [&["--phase", "kernel"][..], &["--from", "0", "--to", "0.2"]] {
        let mut args = vec!["compare", p, p, "--scope", "host"];
        args.extend_from_slice(window);
        let out = hvprof(args).limit(LIMIT).run();
        out.assert_status(0);
        out.assert_stdout_contains("host profile 1 (0x0..");
    }
}

/// Item 4: a timeline.json with one stack deeper than any `--stack-depth`, shared by every
/// sample, is refused naming the limit; no export is written from it.
#[test]
fn a_timeline_deeper_than_hvprof_records_is_refused_and_writes_nothing() {
    let r = run();
    let dir = TempDir::new("fault-timelines-deep");
    let mut t = read_json(&r.out.join("timeline.json"));
    let samples = t["timelines"][0]["samples"]["stack"]
        .as_array()
        .unwrap()
        .len();
    t["timelines"][0]["stacks"] = Value::from(vec![vec!["0x1000"; 1025]]);
    t["timelines"][0]["samples"]["stack"] = Value::from(vec![0; samples]);
    let p = copy(
        &dir,
        "deep",
        &text(&r.out.join("profile.json")),
        &t.to_string(),
    );
    let perf = dir.join("deep.perf.txt");
    let out = hvprof([
        "report",
        p.to_str().unwrap(),
        "--perf-script",
        perf.to_str().unwrap(),
    ])
    .limit(LIMIT)
    .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[
        "timeline.json",
        "over the limit of 1024 frames in one call stack",
    ]);
    assert!(!perf.exists(), "nothing written");
}

/// Item 11: bidi overrides, isolates and line separators in the guest's process names and
/// the command line reach no text output raw: stdout, report.txt, the text timeline, the perf
/// text and compare's Markdown.
#[test]
fn bidi_and_separators_reach_no_text_output() {
    const BIDI: &str = "a\u{202e}evil\u{2066}x\u{2028}y\u{2029}z\u{200f}";
    let raw = |s: &str| s.chars().any(|c| BIDI.contains(c) && !c.is_ascii());
    let r = run();
    let dir = TempDir::new("fault-timelines-bidi");
    let mut v = read_json(&r.out.join("profile.json"));
    v["run"]["cmdline"] = format!("scenario=shares {BIDI}").into();
    for p in v["processes"].as_array_mut().unwrap() {
        p["name"] = BIDI.into();
    }
    let p = copy(
        &dir,
        "bidi",
        &v.to_string(),
        &text(&r.out.join("timeline.json")),
    );
    let ps = p.to_str().unwrap();
    let report_dir = dir.join("out");
    let perf = dir.join("bidi.perf.txt");
    let out = hvprof([
        "report",
        ps,
        "--out",
        report_dir.to_str().unwrap(),
        "--perf-script",
        perf.to_str().unwrap(),
    ])
    .limit(LIMIT)
    .run();
    out.assert_status(0);
    assert!(!raw(&out.stdout) && !raw(&out.stderr), "{out}");
    for f in [
        report_dir.join("report.txt"),
        report_dir.join("timeline.perf.txt"),
        perf.clone(),
    ] {
        assert!(!raw(&text(&f)), "{}", f.display());
    }
    assert!(
        text(&perf).contains("a\u{fffd}evil"),
        "the names are kept, replaced"
    );
    let out = hvprof(["report", ps, "--timeline"]).limit(LIMIT).run();
    out.assert_status(0);
    assert!(!raw(&out.stdout), "{out}");
    let md = dir.join("summary.md");
    let base = r.out.join("profile.json");
    let out = hvprof([
        "compare",
        base.to_str().unwrap(),
        ps,
        "--markdown",
        md.to_str().unwrap(),
    ])
    .limit(LIMIT)
    .run();
    assert!(matches!(out.code(), Some(0 | 1)), "{out}");
    assert!(!raw(&out.stdout) && !raw(&out.stderr), "{out}");
    assert!(!raw(&text(&md)), "{}", text(&md));
}

/// Item 13: a key given twice in profile.json or timeline.json is refused naming the key and
/// where it is, status 2.
#[test]
fn a_key_given_twice_is_refused_naming_it() {
    let r = run();
    let dir = TempDir::new("fault-timelines-keys");
    let profile = text(&r.out.join("profile.json"));
    let timeline = text(&r.out.join("timeline.json"));
    let twice = profile.replacen(r#""vcpus":"#, r#""vcpus":1,"vcpus":"#, 1);
    assert_ne!(twice, profile);
    let p = copy(&dir, "profile", &twice, &timeline);
    let out = hvprof(["report", p.to_str().unwrap()]).limit(LIMIT).run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&["profile.json", r#"the key "vcpus" is given twice in run"#]);
    let twice = timeline.replacen(r#""samples":{"#, r#""samples":{"cpl":[],"#, 1);
    assert_ne!(twice, timeline);
    let p = copy(&dir, "timeline", &profile, &twice);
    let out = hvprof(["compare", p.to_str().unwrap(), p.to_str().unwrap()])
        .limit(LIMIT)
        .run();
    out.assert_status(status::USAGE);
    out.assert_error_line(&[
        "timeline.json",
        r#"the key "cpl" is given twice in timelines[0].samples"#,
    ]);
}
