use super::*;
use crate::profile::tests::call_site_symbols;
use crate::time_axis::testdata::profile;

#[test]
fn by_phase_each_vcpu_gives_its_top_functions_and_processes() {
    let out = render(&profile(), &call_site_symbols(), Bins::Phases, 3);
    let expected = "\
timeline of object 2: 90 samples (4 dropped past the recorder's cap), 8 markers (0 dropped); bins by phase
0.000-1.000 s  firmware
  vCPU 0       10 samples  m!caller 10
  vCPU 1       10 samples  m!caller 10
  vCPU 2       10 samples  m!caller 10
  markers: hypercall vCPU 0 0.200 s QUERY_INTERVAL -> STATUS_SUCCESS; halt vCPU 1 0.500-0.700 s hlt
1.000-2.000 s  kernel
  vCPU 0       10 samples  m!hot 10 | awk (pid 57) 10
  vCPU 1       10 samples  m!hot 10 | awk (pid 57) 10
  vCPU 2       10 samples  m!hot 10 | awk (pid 57) 10
  markers: object 1.200-2.400 s object 1; pause 1.500-1.600 s paused
2.000-3.000 s  user
  vCPU 0       10 samples  m!next 8, 0x5000 2 | init (pid 1) 10
  vCPU 1       10 samples  m!next 8, 0x5000 2 | init (pid 1) 10
  vCPU 2       10 samples  m!next 8, 0x5000 2 | init (pid 1) 10
  markers: exit vCPU 2 2.100-2.101 s port 0x3f8
";
    assert_eq!(out, expected);
}

#[test]
fn fixed_bins_cut_the_run_by_seconds_and_top_limits_the_rows() {
    let out = render(&profile(), &call_site_symbols(), Bins::Seconds(0.5), 1);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with("; bins of 0.5 s"));
    let bins: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with(' '))
        .skip(1)
        .collect();
    assert_eq!(
        bins,
        [
            "0.000-0.500 s",
            "0.500-1.000 s",
            "1.000-1.500 s",
            "1.500-2.000 s",
            "2.000-2.500 s",
            "2.500-3.000 s"
        ]
    );
    assert!(lines.contains(&"  vCPU 1        5 samples  m!next 4 | init (pid 1) 5"));
    assert!(lines.contains(&"  markers: halt vCPU 1 0.500-0.700 s hlt"));
}

#[test]
fn without_phases_bins_are_seconds_and_too_fine_bins_are_widened() {
    let mut p = profile();
    p.timelines[0]
        .markers
        .retain(|m| m.kind != MarkerKind::Phase);
    let out = render(&p, &call_site_symbols(), Bins::Phases, 3);
    assert!(out.lines().next().unwrap().ends_with("; bins of 1 s"));
    assert!(out.contains("\n2.000-3.000 s\n"));
    // A nanosecond bin over 2.92 s would be billions of bins: at most MAX_BINS.
    let out = render(&p, &call_site_symbols(), Bins::Seconds(1e-9), 3);
    let bins = out.lines().filter(|l| !l.starts_with(' ')).count() - 1;
    assert!(bins <= usize::try_from(MAX_BINS).unwrap(), "{bins}");
    assert_eq!(
        out.matches(" samples  ").count(),
        90,
        "every sample in a bin of its own"
    );
}

#[test]
fn a_profile_without_a_timeline_says_so() {
    let mut p = profile();
    p.timelines.clear();
    assert_eq!(
        render(&p, &call_site_symbols(), Bins::Phases, 3),
        "no timeline: the run was recorded without --timeline\n"
    );
}

#[test]
fn the_whole_run_is_a_bin_only_without_finer_phases() {
    let mut p = profile();
    let run = Marker {
        kind: MarkerKind::Phase,
        vcpu: None,
        start_ns: 0,
        end_ns: 3_000_000_000,
        name: RUN_PHASE.into(),
    };
    p.timelines[0].markers.insert(1, run.clone());
    let out = render(&p, &call_site_symbols(), Bins::Phases, 3);
    let bins: Vec<&str> = out.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(
        bins[1..],
        [
            "0.000-1.000 s  firmware",
            "1.000-2.000 s  kernel",
            "2.000-3.000 s  user"
        ]
    );
    p.timelines[0]
        .markers
        .retain(|m| m.kind != MarkerKind::Phase);
    p.timelines[0].markers.insert(0, run);
    let out = render(&p, &call_site_symbols(), Bins::Phases, 3);
    let bins: Vec<&str> = out.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(bins[1..], ["0.000-3.000 s  run"]);
}

/// A run with two host profiles recording a timeline each: both are printed, in order.
#[test]
fn every_timeline_is_printed() {
    let mut p = profile();
    let mut other = p.timelines[0].clone();
    other.object = 3;
    other.samples.truncate(5);
    p.timelines.push(other);
    let out = render(&p, &call_site_symbols(), Bins::Phases, 3);
    let heads: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("timeline of object"))
        .collect();
    assert_eq!(heads.len(), 2, "{out}");
    assert!(heads[0].starts_with("timeline of object 2: 90 samples"));
    assert!(heads[1].starts_with("timeline of object 3: 5 samples"));
    assert!(
        out.contains("\n\ntimeline of object 3"),
        "a blank line between"
    );
}

/// Regression (issue 40, item 11): bidi overrides and line separators in a guest process's
/// name, a symbol and a marker reached `report --timeline`'s text raw.
#[test]
fn bidi_and_separators_are_replaced_in_the_text_timeline() {
    use crate::sanitize::tests::{assert_no_bidi, BIDI_NAME};
    use crate::symbols::tests::module;
    let mut p = profile();
    p.processes[1].name = BIDI_NAME.into();
    p.timelines[0].markers[2].name = BIDI_NAME.into();
    let symbols = Symbols::from_module(module("m", 0x1000, &[(0x70, 0x30, BIDI_NAME)]));
    let out = render(&p, &symbols, Bins::Phases, 3);
    assert!(out.contains("a\u{fffd}evil"), "{out}");
    assert_no_bidi("the text timeline", &out);
}

/// Issue 40, item 4: the text timeline is refused once past its limit, a bin at a time.
#[test]
fn a_text_timeline_past_its_limit_is_refused() {
    let p = profile();
    let symbols = call_site_symbols();
    let whole = render(&p, &symbols, Bins::Seconds(0.1), 3);
    let n = u64::try_from(whole.len()).unwrap();
    assert_eq!(
        render_within(&p, &symbols, Bins::Seconds(0.1), 3, n).unwrap(),
        whole
    );
    let e = render_within(&p, &symbols, Bins::Seconds(0.1), 3, n / 2).unwrap_err();
    assert!(e.is_too_large());
    assert!(
        e.to_string()
            .starts_with("the text timeline would be at least"),
        "{e}"
    );
}
