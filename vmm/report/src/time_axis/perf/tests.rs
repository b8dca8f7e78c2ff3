use std::collections::BTreeMap;

use inferno::collapse::Collapse;

use super::*;
use crate::profile::tests::call_site_symbols;
use crate::time_axis::testdata::profile;

fn text() -> String {
    let mut out = Vec::new();
    write(&profile(), &call_site_symbols(), Tracks::Threads, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn samples_are_written_as_perf_script_prints_them() {
    let text = text();
    let events: Vec<&str> = text.split("\n\n").collect();
    // 90 samples, each ended by a blank line.
    assert_eq!(events.len(), 91);
    assert_eq!(events[90], "");
    assert_eq!(
        events[0],
        "vcpu0 0/0 [000] 0.000000: 1 cpu-clock:\n\t1045 m!caller+0x5 (m)"
    );
    assert_eq!(
        events[30],
        "awk 57/57 [000] 1.000000: 1 cpu-clock:\n\t1075 m!hot+0x5 (m)\n\t1050 m!caller+0x10 (m)"
    );
    assert_eq!(
        events[32],
        "worker 57/58 [002] 1.020000: 1 cpu-clock:\n\t1075 m!hot+0x5 (m)\n\t1050 m!caller+0x10 (m)"
    );
    assert_eq!(
        events[61],
        "init 1/1 [001] 2.010000: 1 cpu-clock:\n\t5000 0x5000+0x0 ([unknown])"
    );
    assert_eq!(
        events[63],
        "init 1/1 [000] 2.100000: 1 cpu-clock:\n\t1055 m!next+0x5 (m)"
    );
}

#[test]
fn per_vcpu_tracks_name_every_sample_by_its_vcpu_with_the_same_frames() {
    let mut out = Vec::new();
    write(&profile(), &call_site_symbols(), Tracks::Vcpus, &mut out).unwrap();
    let by_vcpu = String::from_utf8(out).unwrap();
    let threads = text();
    assert_eq!(by_vcpu.lines().count(), threads.lines().count());
    for (v, t) in by_vcpu.split("\n\n").zip(threads.split("\n\n")) {
        let (vh, vf) = v.split_once('\n').unwrap_or((v, ""));
        let (th, tf) = t.split_once('\n').unwrap_or((t, ""));
        assert_eq!(vf, tf, "the same frames");
        // `comm pid/tid [cpu] time:`: only the comm and ids change, to the vCPU's.
        let (_, rest) = th.split_once(" [").unwrap_or(("", ""));
        if !rest.is_empty() {
            let cpu: u32 = rest[..3].parse().unwrap();
            assert_eq!(vh, format!("vcpu{cpu} 0/0 [{rest}"));
        }
    }
    assert!(by_vcpu.contains("vcpu2 0/0 [002] 1.020000: 1 cpu-clock:\n\t1075 m!hot+0x5 (m)"));
}

#[test]
fn names_that_would_split_a_line_are_one_word() {
    let mut p = profile();
    p.threads[2].name = Some("a b\n12".to_string());
    p.processes[0].name = "42".to_string();
    let mut out = Vec::new();
    write(&p, &call_site_symbols(), Tracks::Threads, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\na_b_12 57/58 [002] 1.020000: 1 cpu-clock:\n"));
    assert!(text.contains("\n_42 1/1 [000] 2.000000: 1 cpu-clock:\n"));
}

/// Folded lines as (frames after the first, samples) added up.
fn tails<'a>(
    lines: impl Iterator<Item = &'a str>,
    skip: impl Fn(&str) -> bool,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in lines {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        let frames: Vec<&str> = stack.split(';').skip(1).filter(|f| !skip(f)).collect();
        *out.entry(frames.join(";")).or_default() += count.parse::<u64>().unwrap();
    }
    out
}

#[test]
fn infernos_perf_collapser_folds_it_into_the_flame_graphs_stacks() {
    let p = profile();
    let symbols = call_site_symbols();
    let mut folded = Vec::new();
    inferno::collapse::perf::Folder::from(inferno::collapse::perf::Options::default())
        .collapse(text().as_bytes(), &mut folded)
        .unwrap();
    let folded = String::from_utf8(folded).unwrap();
    let theirs = tails(folded.lines(), |_| false);
    // The flame graph's own folding of the same samples (the fixture's host object is the
    // timeline counted), its process frames set aside: perf's comm stands there.
    let labels: Vec<String> = p.processes.iter().map(|r| r.label()).collect();
    let ours_lines = crate::flame::folded(&p, &symbols);
    let ours = tails(
        ours_lines
            .iter()
            .map(String::as_str)
            .filter(|l| l.starts_with("object 2 ")),
        |f| labels.iter().any(|l| l == f),
    );
    assert_eq!(theirs, ours);
    assert_eq!(
        ours,
        BTreeMap::from([
            ("m!caller".to_string(), 30),
            ("m!caller;m!hot".to_string(), 30),
            ("m!next".to_string(), 24),
            ("0x5000".to_string(), 6),
        ])
    );
    // The comms: each thread by its name, else its process's; vCPUs with none.
    let comms: std::collections::BTreeSet<&str> = folded
        .lines()
        .map(|l| l.split(';').next().unwrap())
        .collect();
    assert_eq!(
        comms.into_iter().collect::<Vec<_>>(),
        ["awk", "init", "vcpu0", "vcpu1", "vcpu2", "worker"]
    );
}

/// Regression (issue 40, item 11): bidi overrides and line separators in a guest thread's
/// name and a symbol reached the perf script text raw.
#[test]
fn bidi_and_separators_are_replaced_in_perf_text() {
    use crate::sanitize::tests::{assert_no_bidi, BIDI_NAME};
    use crate::symbols::tests::module;
    let mut p = profile();
    p.threads[2].name = Some(BIDI_NAME.into());
    p.processes[1].name = BIDI_NAME.into();
    let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, BIDI_NAME)]));
    for tracks in [Tracks::Threads, Tracks::Vcpus] {
        let mut out = Vec::new();
        write(&p, &symbols, tracks, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("m!a\u{fffd}evil"), "{text}");
        assert_no_bidi("perf script text", &text);
    }
}

/// Regression (issue 40, item 4): one deep stack shared by every sample of a small
/// timeline.json wrote gigabytes of perf text. The text is sized first, exactly, and refused
/// past the limit before a byte is written.
#[test]
fn perf_text_past_its_limit_is_refused_before_a_byte_is_written() {
    let p = profile();
    let symbols = call_site_symbols();
    let t = &p.timelines[0];
    let mut out = Vec::new();
    write_timeline(&p, t, &symbols, Tracks::Threads, &mut out).unwrap();
    let exact = u64::try_from(out.len()).unwrap();
    for tracks in [Tracks::Threads, Tracks::Vcpus] {
        let mut out = Vec::new();
        write_timeline(&p, t, &symbols, tracks, &mut out).unwrap();
        assert_eq!(
            size(&p, t, &symbols, tracks, u64::MAX),
            u64::try_from(out.len()).unwrap()
        );
    }
    let mut out = Vec::new();
    write_within(&p, t, &symbols, Tracks::Threads, exact, &mut out).unwrap();
    let mut out = Vec::new();
    let e = write_within(&p, t, &symbols, Tracks::Threads, exact - 1, &mut out).unwrap_err();
    assert!(out.is_empty(), "nothing written");
    assert!(e.is_too_large());
    assert!(
        e.to_string()
            .starts_with("the perf script text would be at least"),
        "{e}"
    );
}

/// A file a process mapped names that process's addresses, and only its: init's samples at
/// 0x5000 by init's own file, in perf script text and in the Firefox Profiler's export alike.
#[test]
fn a_processs_own_files_name_its_frames() {
    let p = profile();
    let symbols = crate::time_axis::testdata::init_maps_sh(&p);
    let mut out = Vec::new();
    write(&p, &symbols, Tracks::Threads, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let events: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(
        events[61],
        "init 1/1 [001] 2.010000: 1 cpu-clock:\n\t5000 sh!main+0x0 (sh)"
    );
    // Counted as written: the size check sees the same names.
    let t = &p.timelines[0];
    assert_eq!(
        size(&p, t, &symbols, Tracks::Threads, u64::MAX),
        text.len() as u64
    );
}
