//! The run on a time axis (issue 32): the reference guest's `scenario=phases` runs f1, then
//! f2, then f4, each for a fixed TSC time with a halt between them and a hypercall burst after,
//! and prints its own TSC record of every boundary. The VM runs in this process through the
//! vmm library with a host profile recording a timeline (the same spec `hvprof profile
//! --timeline` starts), and the test checks the recorded timeline against the guest's record,
//! converted to host time through two anchors both sides record: the guest's TSC just before a
//! hypercall and hvprof's marker of that hypercall (one before f1, the burst after f4).
//!
//! What must hold whatever the host's delays, in the order the one sampled vCPU's samples were
//! taken (their stamps keep it): samples sorted; each phase's function sampled, every f1
//! sample before every f2 sample before every f4 sample; between a phase's first and last
//! sample of its function, user mode only in that function or its loop; a halt marker between
//! two phases; the burst's markers after f4; the run's `kernel` phase from its start and its
//! `user` phase from its first user-mode sample, which is f1's process (nothing runs at CPL3
//! before it). How far each phase's samples land from the guest's record is printed (first
//! and last against the boundaries, and how many lie outside by more than an interval):
//! converted through two hypercall anchors, it depends on how long the host delayed a sample
//! or an anchor (a vCPU thread descheduled under load), so it is a figure, not an assertion.
//! Since a sample's time is read before its walk, every boundary landed within one interval in
//! 7 of 9 runs here (one boundary 1.3 and 3.6 ms off in the others: host delays); f1's start
//! used to be 10-87 ms late, the time the first user-mode walk spent searching 64 MiB below the
//! PC for a PE header page by page.

use std::path::Path;
use std::time::Duration;

use crate::harness::phase_spans;
use profile_core::ProfileSource;
use report::timeline::{MarkerKind, Timeline};
use vmm::config::{SerialOutput, SharedBuffer, VmConfig};
use vmm::profiler::host_profiles::HostProfileSpec;
use vmm::vm::{run_with, RunHooks};

/// ProfileTime's interval for the run: 1 ms, in 100 ns units.
const INTERVAL_100NS: u32 = 10_000;
const FUNCTIONS: [&str; 3] = ["shares_f1", "shares_f2", "shares_f4"];
const QUERY: &str = "QUERY_INTERVAL -> STATUS_SUCCESS";

/// The value of `key=<u64>` on the guest's line starting with `prefix`.
fn field(text: &str, prefix: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in the guest's output:\n{text}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}=<u64> in {line:?}"))
}

/// `[start, end)` of each phase function in the reference guest's symbols, and of the phase
/// runner (`user::phases::main`).
fn function_ranges() -> (Vec<(u64, u64)>, (u64, u64)) {
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let bytes = std::fs::read(elf).expect("the reference guest's ELF");
    let module = report::symbols::elf::read("refguest", &bytes).expect("its symbols");
    let range = |found: &dyn Fn(&str) -> bool, what: &str| {
        let s = module
            .symbols
            .iter()
            .find(|s| found(&s.name))
            .unwrap_or_else(|| panic!("no symbol {what}"));
        assert!(s.size > 0, "{what} has no size");
        (module.base + s.rva, module.base + s.rva + s.size)
    };
    let functions = FUNCTIONS
        .iter()
        .map(|f| range(&|n: &str| n == *f, f))
        .collect();
    let runner = range(
        &|n: &str| n.contains("user::phases::main"),
        "user::phases::main",
    );
    (functions, runner)
}

fn run_phases() -> (Timeline, String, u64) {
    let serial = SharedBuffer::default();
    let mut config = VmConfig::new(vmm::refguest::kernel_spec("scenario=phases"));
    config.serial = SerialOutput::Buffer(serial.clone());
    config.serial_input = false;
    config.timeout = Some(Duration::from_secs(120));
    let spec = HostProfileSpec {
        timeline: true,
        vcpus: Some(vec![0]),
        ..HostProfileSpec::whole_space()
    };
    let report = run_with(
        &config,
        RunHooks {
            host_profiles: vec![spec],
            interval: Some((ProfileSource::TIME, INTERVAL_100NS)),
            ..Default::default()
        },
    )
    .expect("the VM runs");
    let text = serial.text();
    assert!(
        text.contains("refguest: PASS"),
        "the guest did not pass ({}):\n{text}",
        report.outcome
    );
    assert_eq!(
        report.timelines.len(),
        1,
        "one timeline for the one profile"
    );
    let interval_ns = u64::from(report.interval_100ns) * 100;
    (report.timelines[0].clone(), text, interval_ns)
}

#[test]
fn phases_land_where_the_guest_says_they_were() {
    let (t, text, interval) = run_phases();
    let (ranges, runner) = function_ranges();
    assert!(
        t.samples.windows(2).all(|w| w[0].t_ns <= w[1].t_ns),
        "samples sorted by time"
    );
    assert!(t
        .samples
        .iter()
        .all(|s| (s.stack as usize) < t.stacks.len()));
    assert!(t.markers.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
    assert!(t
        .markers
        .iter()
        .any(|m| m.kind == MarkerKind::Phase && m.name == "run"));

    // The anchors: the first QUERY_INTERVAL (before f1) and the burst's first (after f4).
    let n = field(&text, "phases burst", "n");
    let queries: Vec<_> = t
        .markers
        .iter()
        .filter(|m| m.kind == MarkerKind::Hypercall && m.name == QUERY)
        .collect();
    assert!(
        queries.len() as u64 > n,
        "{} QUERY_INTERVAL markers: want the anchor and a burst of {n}",
        queries.len()
    );
    let burst = &queries[queries.len() - usize::try_from(n).expect("a small burst")..];
    let (a_tsc, b_tsc) = (
        field(&text, "phases anchor", "anchor"),
        field(&text, "phases burst", "first"),
    );
    let (a_ns, b_ns) = (queries[0].start_ns, burst[0].start_ns);
    assert!(b_tsc > a_tsc && b_ns > a_ns);
    let host = |tsc: u64| -> u64 {
        let wide = |v: u64| i128::from(v);
        let ns = wide(a_ns)
            + (wide(tsc) - wide(a_tsc)) * (wide(b_ns) - wide(a_ns)) / (wide(b_tsc) - wide(a_tsc));
        u64::try_from(ns).expect("a time after the run's start")
    };
    eprintln!(
        "anchors: tsc {a_tsc} -> {a_ns} ns, tsc {b_tsc} -> {b_ns} ns ({:.1} MHz as hvprof saw it, the guest calibrated {} Hz); interval {interval} ns",
        (b_tsc - a_tsc) as f64 / (b_ns - a_ns) as f64 * 1e3,
        field(&text, "phases anchor", "tsc_hz"),
    );

    let phases: Vec<(u64, u64)> = ["f1", "f2", "f4"]
        .iter()
        .map(|p| {
            let prefix = format!("phases phase={p} ");
            (
                host(field(&text, &prefix, "start")),
                host(field(&text, &prefix, "end")),
            )
        })
        .collect();
    let function_of = |pc: u64| ranges.iter().position(|(s, e)| pc >= *s && pc < *e);
    let pc_of = |i: usize| t.stacks[t.samples[i].stack as usize][0];
    // Where each phase's function was sampled: the first and last sample (index) in it.
    let mut blocks = Vec::new();
    for (k, &(start, end)) in phases.iter().enumerate() {
        let mine: Vec<usize> = (0..t.samples.len())
            .filter(|&i| function_of(pc_of(i)) == Some(k))
            .collect();
        assert!(!mine.is_empty(), "no sample in {}", FUNCTIONS[k]);
        let (first, last) = (mine[0], mine[mine.len() - 1]);
        blocks.push((first, last));
        // In the order the vCPU was sampled (one vCPU: its samples are stamped in the order
        // they were taken, whatever the host's delays), from the phase's first sample of its
        // function to its last, user mode is the phase's process: its function or its loop.
        let foreign: Vec<u64> = (first..=last)
            .filter(|&i| t.samples[i].cpl == 3)
            .map(pc_of)
            .filter(|&pc| function_of(pc) != Some(k) && !(pc >= runner.0 && pc < runner.1))
            .collect();
        assert_eq!(
            foreign,
            Vec::<u64>::new(),
            "user-mode samples of other code among {}'s",
            FUNCTIONS[k]
        );
        // How far the samples land from the guest's own record, converted to host time: a
        // figure (the host may delay a sample, or an anchor, by more than an interval).
        let at = |i: usize| t.samples[i].t_ns;
        let (lead, trail) = (at(first).abs_diff(start), end.abs_diff(at(last)));
        let outside = mine
            .iter()
            .filter(|&&i| at(i) + interval < start || at(i) > end + interval)
            .count();
        let gap = mine
            .windows(2)
            .map(|w| at(w[1]) - at(w[0]))
            .max()
            .unwrap_or(0);
        eprintln!(
            "{}: {} samples; first {lead} ns from the guest's start, last {trail} ns from its end \
             (within one interval: {} / {}); {outside} outside the phase by more than an \
             interval; largest gap {gap} ns",
            FUNCTIONS[k],
            mine.len(),
            lead <= interval,
            trail <= interval
        );
    }
    // The phases one after the other: every f1 sample before every f2 sample, and f2's before
    // f4's.
    assert!(
        blocks.windows(2).all(|w| w[0].1 < w[1].0),
        "the phases' samples overlap (first and last sample of each: {blocks:?})"
    );

    // The run's phases: the kernel (loaded by the VMM) from the start, user mode from the
    // first CPL3 sample, which is f1's process (nothing runs at CPL3 before it).
    let phase = |name: &str| {
        let found = phase_spans(&t, name);
        assert_eq!(found.len(), 1, "one {name} phase: {:?}", t.markers);
        found[0]
    };
    let (kernel, user) = (phase("kernel"), phase("user"));
    assert_eq!(
        phase_spans(&t, "firmware"),
        Vec::<(u64, u64)>::new(),
        "no firmware phase in a run that loads its kernel"
    );
    let first_cpl3 = (0..t.samples.len())
        .find(|&i| t.samples[i].cpl == 3)
        .expect("a CPL3 sample");
    assert_eq!(
        kernel,
        (0, user.0),
        "the kernel phase ends where user mode begins"
    );
    assert_eq!(
        user.0, t.samples[first_cpl3].t_ns,
        "user mode begins at its first sample"
    );
    let pc = pc_of(first_cpl3);
    assert!(
        function_of(pc) == Some(0) || (pc >= runner.0 && pc < runner.1),
        "the first user-mode sample ({pc:#x}) is not f1's process"
    );
    eprintln!(
        "phases: kernel 0..{} ns, user {}..{} ns; f1's process started at {} ns by the guest's TSC",
        kernel.1, user.0, user.1, phases[0].0
    );

    // Between two phases' samples the vCPU halted (a halt marker, stamped by the same vCPU
    // thread in the same order), and the hypercall burst comes after f4's last sample.
    for k in 0..2 {
        let (from, to) = (t.samples[blocks[k].1].t_ns, t.samples[blocks[k + 1].0].t_ns);
        let halts = t
            .markers
            .iter()
            .filter(|m| m.kind == MarkerKind::Halt && m.vcpu == Some(0))
            .filter(|m| m.start_ns >= from && m.start_ns <= to)
            .count();
        eprintln!("halt {} ({from}..{to} ns): {halts} halt markers", k + 1);
        assert!(
            halts > 0,
            "no halt marker between phase {} and {}",
            k + 1,
            k + 2
        );
    }
    let f4_last = t.samples[blocks[2].1].t_ns;
    assert!(burst
        .iter()
        .all(|m| m.vcpu == Some(0) && m.start_ns >= f4_last));
}

/// Issue 40, item 4: the limits a saved timeline.json is read within are the recorder's caps,
/// so every timeline hvprof records reads back (and nothing larger does).
#[test]
fn read_limits_accept_what_the_recorder_keeps() {
    use report::time_axis::file::shape;
    use vmm::profiler::{host_profiles, timeline};
    assert_eq!(shape::MAX_SAMPLES, timeline::MAX_SAMPLES);
    // The run's phase markers (run, firmware, kernel, user) are kept past the marker cap.
    assert_eq!(shape::MAX_MARKERS, timeline::MAX_MARKERS + 4);
    assert_eq!(
        shape::MAX_STACK_DEPTH,
        u64::try_from(host_profiles::MAX_STACK_DEPTH).unwrap()
    );
    assert_eq!(
        shape::MAX_FRAMES_PER_VCPU,
        u64::try_from(timeline::MAX_STACK_FRAMES).unwrap()
    );
}
