use std::path::Path;

use super::*;
use crate::time_axis::testdata::{profile, timeline, MS};

fn written(p: &Profile) -> Vec<u8> {
    let mut out = Vec::new();
    write(p, &mut out).unwrap();
    out
}

/// The problem `check` finds in `p`'s timelines, as `at: problem`.
fn problem(p: &Profile) -> String {
    check(p, &p.timelines).unwrap_err().to_string()
}

#[test]
fn reads_back_what_it_writes() {
    let p = profile();
    let bytes = written(&p);
    assert_eq!(read(&p, bytes.as_slice()).unwrap(), p.timelines);
    let text = String::from_utf8(bytes).unwrap();
    // Columnar and delta-encoded: vCPU 1's first sample is 10 ms after vCPU 0's.
    assert!(
        text.contains(r#""t_delta_ns":[0,10000000,10000000,80000000,"#),
        "{text}"
    );
    assert!(text.contains(r#""stacks":[["0x1075","0x1050"],["0x1045"],["0x1055"],["0x5000"]]"#));
    assert!(text.contains(
        r#""kind":["phase","hypercall","halt","phase","object","pause","phase","exit"]"#
    ));
    assert!(text.ends_with("}\n"));
}

#[test]
fn write_all_writes_the_timeline_files_and_read_profile_reads_them_back() {
    let dir = std::env::temp_dir().join(format!("hvprof-timeline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let p = profile();
    let symbols = crate::profile::tests::call_site_symbols();
    let files = crate::write_all(&dir, &p, &symbols).unwrap();
    let names: Vec<&str> = files
        .timeline
        .iter()
        .map(|f| f.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["timeline.json", "timeline.fxprof.json", "timeline.perf.txt"]
    );
    for f in files.all() {
        assert!(std::fs::metadata(f).unwrap().len() > 0, "{}", f.display());
    }
    let back = crate::read_profile(&files.json).unwrap();
    assert_eq!(back.timelines, p.timelines);
    // profile.json itself is as before: no timeline in it.
    let json = std::fs::read_to_string(&files.json).unwrap();
    assert!(!json.contains("t_delta_ns"));
    // A profile without a timeline written over it takes the old timeline away.
    let mut plain = p.clone();
    plain.timelines.clear();
    let files = crate::write_all(&dir, &plain, &symbols).unwrap();
    assert!(files.timeline.is_empty());
    assert!(!dir.join("timeline.json").exists());
    assert!(crate::read_profile(&files.json)
        .unwrap()
        .timelines
        .is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_timeline_of_a_profile_is_beside_it() {
    assert_eq!(
        path_beside(Path::new("/r/profile.json")),
        Path::new("/r/timeline.json")
    );
    assert_eq!(
        path_beside(Path::new("/r/base.json")),
        Path::new("/r/base.timeline.json")
    );
}

#[test]
fn each_broken_rule_is_named() {
    let base = profile();
    let mut p = base.clone();
    p.timelines[0].samples.swap(0, 1);
    assert_eq!(
        problem(&p),
        "timelines[0].samples[1].t_ns: 0 ns comes before 10000000 ns: samples are in time order"
    );
    let mut p = base.clone();
    p.timelines[0].samples[3].stack = 4;
    assert_eq!(
        problem(&p),
        "timelines[0].samples[3].stack: stack 4 of a table of 4"
    );
    let mut p = base.clone();
    p.timelines[0].samples[2].thread = Some(9);
    assert_eq!(
        problem(&p),
        "timelines[0].samples[2].thread: thread 9 is not in the profile's thread table"
    );
    let mut p = base.clone();
    p.timelines[0].samples[0].vcpu = 3;
    assert_eq!(
        problem(&p),
        "timelines[0].samples[0].vcpu: vCPU 3 of a run with 3"
    );
    let mut p = base.clone();
    p.timelines[0].samples[0].cpl = 4;
    assert_eq!(problem(&p), "timelines[0].samples[0].cpl: CPL 4");
    let mut p = base.clone();
    p.timelines[0].markers[2].end_ns = 400 * MS;
    assert_eq!(
        problem(&p),
        "timelines[0].markers[2].end_ns: ends at 400000000 ns, before its start 500000000 ns"
    );
    let mut p = base.clone();
    p.timelines[0].markers.swap(0, 1);
    assert!(problem(&p).starts_with("timelines[0].markers[1].start_ns: 0 ns comes before"));
    let mut p = base.clone();
    p.timelines[0].stacks[2].clear();
    assert_eq!(
        problem(&p),
        "timelines[0].stacks[2]: an empty stack: every sample has at least its PC"
    );
    let mut p = base.clone();
    p.timelines[0].object = 1;
    assert_eq!(
        problem(&p),
        "timelines[0].object: object 1 is not a host profile of the profile"
    );
    let mut p = base.clone();
    p.timelines.push(timeline());
    assert_eq!(
        problem(&p),
        "timelines[1].object: object 2 has two timelines"
    );
    // Writing checks too: no file a reader refuses is written.
    let mut p = base.clone();
    p.timelines[0].samples[3].stack = 7;
    assert!(matches!(
        write(&p, Vec::new()),
        Err(ReportError::Inconsistent(_))
    ));
}

#[test]
fn files_that_are_not_this_runs_timeline_are_refused() {
    let p = profile();
    let text = String::from_utf8(written(&p)).unwrap();
    let read_text = |t: &str| read(&p, t.as_bytes()).unwrap_err().to_string();
    assert_eq!(
        read_text(&text.replace("hvprof-timeline", "other")),
        "not an hvprof timeline (its \"format\" is not \"hvprof-timeline\")"
    );
    assert_eq!(
        read_text(&text.replace(r#""format_version":1"#, r#""format_version":2"#)),
        "timeline format version 2; this hvprof reads version 1"
    );
    assert!(
        read_text(&text.replace("2023-11-14", "2024-01-01")).starts_with(
            "run_start_time: \"2024-01-01T22:13:20.123Z\": the timeline is of another run"
        )
    );
    // Columns of other lengths.
    assert_eq!(
        read_text(&text.replace(r#""cpl":[0,"#, r#""cpl":["#)),
        "timelines[0].samples.cpl: 89 entries, t_delta_ns has 90: columns must be of one length"
    );
    assert_eq!(
        read_text(&text.replace(r#""name":["firmware","#, r#""name":["#)),
        "timelines[0].markers.name: 7 entries, kind has 8: columns must be of one length"
    );
    // Times past 2^64 ns.
    assert_eq!(
        read_text(&text.replace(
            r#""t_delta_ns":[0,"#,
            r#""t_delta_ns":["0xffffffffffffffff","#
        )),
        "timelines[0].samples.t_delta_ns[1]: the time passes 2^64-1 ns"
    );
}

/// Regression (issue 40, item 13): a key given twice in timeline.json was read, the last value
/// winning (the file went through a `serde_json::Value`).
#[test]
fn duplicate_keys_are_refused_naming_the_key_and_object() {
    let p = profile();
    let text = String::from_utf8(written(&p)).unwrap();
    for (edited, want) in [
        (
            text.replacen(r#""samples":{"#, r#""samples":{"cpl":[],"#, 1),
            r#"the key "cpl" is given twice in timelines[0].samples"#,
        ),
        (
            text.replacen(r#""format":"#, r#""run_start_time":"x","format":"#, 1),
            r#"the key "run_start_time" is given twice in the top level"#,
        ),
    ] {
        assert_ne!(edited, text);
        let e = read(&p, edited.as_bytes()).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(chain.contains(want), "{chain}");
    }
}

/// `p`'s timeline.json with its first timeline's samples and stacks replaced: `samples`
/// samples (all at time 0 on vCPU 0, stack 0) and `stacks` stacks of `depth` frames.
fn with_shape(p: &Profile, samples: usize, stacks: usize, depth: usize) -> String {
    let text = String::from_utf8(written(p)).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let t = &mut v["timelines"][0];
    let zeros = Value::from(vec![0u32; samples]);
    for column in ["t_delta_ns", "vcpu", "cpl", "stack"] {
        t["samples"][column] = zeros.clone();
    }
    t["samples"]["thread"] = Value::from(vec![Value::Null; samples]);
    t["stacks"] = Value::from(vec![vec!["0x1000"; depth]; stacks]);
    v.to_string()
}

/// Regression (issue 40, item 4): a small timeline.json with one very deep stack, or with
/// millions of samples, was read whole (and its perf text written for gigabytes). Each limit
/// of what hvprof records is named past it, and a file at the limits reads.
#[test]
fn a_timeline_past_what_hvprof_records_is_refused_naming_the_limit() {
    use super::shape::{MAX_FRAMES_PER_VCPU, MAX_SAMPLES, MAX_STACK_DEPTH};
    let mut p = profile();
    p.run.vcpus = 1;
    for m in &mut p.timelines[0].markers {
        m.vcpu = None;
    }
    p.timelines[0].samples.clear();
    let depth = usize::try_from(MAX_STACK_DEPTH).unwrap();
    let read_text = |t: &str| {
        read(&p, t.as_bytes())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    // At the limits.
    read_text(&with_shape(&p, 1, 1, depth)).unwrap();
    let full = usize::try_from(MAX_FRAMES_PER_VCPU).unwrap() / depth;
    read_text(&with_shape(&p, 1, full, depth)).unwrap();
    // Past them.
    let e = read_text(&with_shape(&p, 1, 1, depth + 1)).unwrap_err();
    assert!(
        e.contains("1025 is over the limit of 1024 frames in one call stack"),
        "{e}"
    );
    let e = read_text(&with_shape(&p, 1, full + 1, depth)).unwrap_err();
    assert!(
        e.contains("1049600 is over the limit of 1048576 frames in one timeline's stack table"),
        "{e}"
    );
    let many = usize::try_from(MAX_SAMPLES).unwrap() + 1;
    let e = read_text(&with_shape(&p, many, 1, 1)).unwrap_err();
    assert!(
        e.starts_with("the timeline holds more than hvprof records: 2000001 is over the limit of 2000000 samples"),
        "{e}"
    );
}
