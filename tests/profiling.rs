//! The profiling scenarios of the reference guest (images/refguest) under hvprof: the guest
//! drives the hypercall ABI through guest-agent at CPL0, runs CPL3 workloads, reads its own
//! counter buffers after STOP and prints its verdict. Each test asserts that verdict (exit
//! status 33 for PASS) and re-checks the key numbers from the guest's lines, so a VMM that
//! counts wrongly fails here even if the guest's own check were too lenient.

use std::path::Path;
use std::time::Duration;

use crate::harness::host::Budget;
use crate::harness::{hvprof_run, Output};

/// What the reference guest writes to isa-debug-exit when its scenario passed / failed.
const PASS: u8 = 0x10;
const FAIL: u8 = 0x11;

/// Each run is a few seconds here; the limit only catches a hang.
const LIMIT: Duration = Duration::from_secs(40);

fn run(cpus: u32, cmdline: &str) -> Output {
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    hvprof_run(elf, &["--cpus", &cpus.to_string(), "--cmdline", cmdline])
        .limit(LIMIT)
        .run()
}

/// The `objects` scenario: 16,384 profile objects created, started, stopped and closed by
/// hypercalls from guest-kernel code, which this host kind emulates. It took 33.7 s on a host
/// whose calibration loop ran at 1.96 us an instruction (about 17M such instructions), so its
/// limit comes from the host's measured speed, not from [`LIMIT`].
const OBJECTS: Budget = Budget {
    insns: 20_000_000,
    margin: 4,
    floor: LIMIT,
};

/// Lines starting with `refguest: <prefix>`.
pub(crate) fn lines<'a>(out: &'a Output, prefix: &str) -> Vec<&'a str> {
    let prefix = format!("refguest: {prefix}");
    out.stdout
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .collect()
}

/// The one line starting with `refguest: <prefix>`.
fn line<'a>(out: &'a Output, prefix: &str) -> &'a str {
    let found = lines(out, prefix);
    assert_eq!(found.len(), 1, "one line starting with {prefix:?}\n{out}");
    found[0]
}

/// The value of `key=value` in `line`, as a number (decimal, 0x hex, or a decimal fraction
/// truncated to its integer part times 100 for `share`-style values: "14.29" -> 1429).
pub(crate) fn num(line: &str, key: &str) -> u64 {
    let word = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"));
    let parsed = if let Some(hex) = word.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else if let Some((int, frac)) = word.split_once('.') {
        // Two decimals: "14.5" is 1450, "14.291" is 1429.
        let hundredths: String = frac.chars().chain("00".chars()).take(2).collect();
        int.parse::<u64>()
            .ok()
            .zip(hundredths.parse::<u64>().ok())
            .map(|(i, f)| i * 100 + f)
    } else {
        word.parse().ok()
    };
    parsed.unwrap_or_else(|| panic!("{key}={word} is not a number in {line:?}"))
}

fn assert_passed(out: &Output) {
    out.assert_debug_exit(PASS);
    out.assert_stdout_contains("refguest: PASS");
    out.assert_stdout_lacks(" BAD");
}

#[test]
fn shares_of_a_1_2_4_workload_match_its_costs() {
    let out = run(2, "scenario=shares");
    assert_passed(&out);
    let mut ends = Vec::new();
    let counts: Vec<u64> = ["f1", "f2", "f4"]
        .iter()
        .map(|f| {
            let l = line(&out, &format!("shares fn={f} "));
            let (start, end) = (num(l, "start"), num(l, "end"));
            assert!(start < end, "{l}");
            ends.push((start, end));
            num(l, "count")
        })
        .collect();
    // Separate ranges in the .user window, in order.
    assert!(ends.windows(2).all(|w| w[0].1 <= w[1].0), "{ends:x?}");
    // How many samples arrive depends on the CPU the host gives the vCPUs, so the counts are
    // held to binomial noise for the number that did (images/refguest/src/scenario/shares.rs):
    // each share within 5 standard deviations of its ideal, and at least 3 points.
    let total: u64 = counts.iter().sum();
    assert!(total >= 200, "too few samples ({total})\n{out}");
    for (count, weight) in counts.iter().zip([1.0, 2.0, 4.0]) {
        let (share, ideal) = (*count as f64 / total as f64, weight / 7.0);
        let tolerance = (5.0 * (ideal * (1.0 - ideal) / total as f64).sqrt()).max(0.03);
        assert!(
            (share - ideal).abs() <= tolerance,
            "share {share:.4} vs {ideal:.4} (tolerance {tolerance:.4})\n{out}"
        );
    }
    // Everything the profile counted is in the three functions (the loop around them is tiny).
    let summary = line(&out, "shares total=");
    assert!(
        num(summary, "total") - num(summary, "in_functions") <= total / 50,
        "{summary}"
    );
}

#[test]
fn shares_with_page_sized_buckets_cannot_tell_the_functions_apart_and_fails() {
    // 4 KiB buckets put f1, f2 and f4 in one bucket: each "share" is then the whole count, so
    // the guest's own check must fail. This pins that the verdict can fail.
    let out = run(1, "scenario=shares shares.ms=400 shares.bucket=12");
    out.assert_debug_exit(FAIL);
    out.assert_stdout_contains("refguest: FAIL: shares: a function's share is off");
}

fn assert_process_isolation(out: &Output) {
    assert_passed(out);
    for (of, own, other) in [("A", "g1", "g2"), ("A2", "g1", "g2"), ("B", "g2", "g1")] {
        let l = lines(out, "process profile ")
            .into_iter()
            .find(|l| l.contains(&format!(" of={of} ")))
            .unwrap_or_else(|| panic!("no profile line for {of}\n{out}"));
        assert!(num(l, own) > 0, "{l}");
        assert_eq!(num(l, other), 0, "{l}");
    }
}

#[test]
fn per_process_profiles_count_only_their_process_on_two_vcpus() {
    let out = run(2, "scenario=process");
    assert_process_isolation(&out);
    // A alone on vCPU 0; B and A2 interleaved on vCPU 1.
    assert!(line(&out, "process proc=A ").contains("cpu=0"), "{out}");
    assert!(line(&out, "process proc=B ").contains("cpu=1"), "{out}");
    assert!(line(&out, "process proc=A2 ").contains("cpu=1"), "{out}");
}

#[test]
fn per_process_profiles_count_only_their_process_interleaved_on_one_vcpu() {
    let out = run(1, "scenario=process process.ms=1000");
    assert_process_isolation(&out);
}

#[test]
fn object_life_cycle_statuses_and_the_started_limit() {
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let out = hvprof_run(elf, &["--cpus", "2", "--cmdline", "scenario=objects"])
        .host_limit(&OBJECTS.limit())
        .run();
    assert_passed(&out);
    for (check, status) in [
        ("start_again", 0xC000_00B8u64),
        ("stop_again", 0xC000_00B7),
        ("bucket_1", 0xC000_000D),
        ("bucket_32", 0xC000_000D),
        ("buffer_too_small", 0xC000_0023),
        ("range_overflow", 0x8000_0005),
        ("buffer_size_0", 0xC000_00F5),
        ("misaligned_buffer", 0x8000_0002),
        ("unsupported_source", 0xC000_00BB),
        ("stop_after_close", 0xC000_0008),
        ("stop_never_issued", 0xC000_0008),
    ] {
        let l = line(&out, &format!("objects {check} "));
        assert_eq!(num(l, "status"), status, "{l}");
    }
    let limit = line(&out, "objects at_limit ");
    assert_eq!(num(limit, "status"), 0xC000_00D3, "{limit}");
    assert_eq!(num(limit, "started"), 8192 * 2, "{limit}");
    assert_eq!(num(limit, "limit"), 8192 * 2, "{limit}");
    let closed = line(&out, "objects close_all ");
    assert_eq!(
        (num(closed, "open"), num(closed, "started")),
        (0, 0),
        "{closed}"
    );
    assert_eq!(num(line(&out, "objects checks="), "bad"), 0);
}

#[test]
fn interval_set_query_clamping_and_sources() {
    let out = run(1, "scenario=interval");
    assert_passed(&out);
    for (check, value) in [
        ("time_default", 39_063),
        ("time_query_in_range", 10_000),
        ("time_query_below_min", 1000),
        ("time_query_above_max", 10_000_000),
        ("unsupported_query", 0),
        ("fixup_before_set", 0),
        ("fixup_query_again", 123_456),
    ] {
        let l = line(&out, &format!("interval {check} "));
        assert_eq!((num(l, "status"), num(l, "value")), (0, value), "{l}");
    }
    let denied = line(&out, "interval time_set_unprivileged ");
    assert_eq!(num(denied, "status"), 0xC000_0061, "{denied}");
}

#[test]
fn affinity_masks_select_the_vcpu_whose_samples_count() {
    let out = run(2, "scenario=affinity");
    assert_passed(&out);
    let only_1 = line(&out, "affinity mask=0b10 ");
    assert!(num(only_1, "h1") > 0 && num(only_1, "h0") == 0, "{only_1}");
    let only_0 = line(&out, "affinity mask=0b1 ");
    assert!(num(only_0, "h0") > 0 && num(only_0, "h1") == 0, "{only_0}");
}

#[test]
fn affinity_with_one_vcpu_fails_in_setup() {
    let out = run(1, "scenario=affinity");
    out.assert_debug_exit(FAIL);
    out.assert_stdout_contains("needs 2 vCPUs");
}

#[test]
fn injected_profile_interrupts_match_samples_and_stop_when_disabled() {
    let out = run(2, "scenario=interrupts");
    assert_passed(&out);
    // What holds however the host schedules the vCPUs (images/refguest/src/scenario/
    // interrupts.rs): every delivery follows a sample, and a `.user` sample merges with a
    // pending one only when it is the second of two taken before the vCPU re-entered the guest,
    // so at least half of them were delivered.
    let per_vcpu = lines(&out, "interrupts vcpu=");
    assert_eq!(per_vcpu.len(), 2, "{out}");
    for l in per_vcpu {
        let (samples, user, deliveries) = (
            num(l, "samples"),
            num(l, "user_samples"),
            num(l, "deliveries"),
        );
        assert!(user > 0, "{l}");
        assert!(user <= 2 * deliveries && deliveries <= samples, "{l}");
    }
    let total = line(&out, "interrupts injected=");
    let (injected, delivered) = (num(total, "injected"), num(total, "delivered"));
    assert!(delivered <= injected + 2, "{total}");
    assert!(num(total, "user_samples") <= 2 * delivered, "{total}");
    // After the disable: at most one interrupt pending and one in its handler, per vCPU.
    for l in lines(&out, "interrupts after_disable ") {
        assert!(num(l, "new_deliveries") <= 2, "{l}");
        assert!(num(l, "new_samples") > 0, "{l}");
    }
}

#[test]
fn a_stopped_profile_never_changes_while_another_keeps_counting() {
    let out = run(1, "scenario=stopped");
    assert_passed(&out);
    stopped_phases_hold(&out, 4);
}

/// The `stopped` scenario's `phases` lines: P1's buffer byte for byte what it was when Stop
/// returned in every phase after it, while P2 keeps counting.
pub(crate) fn stopped_phases_hold(out: &Output, phases: usize) {
    let at_stop = num(line(out, "stopped phase=1 "), "p1_stopped_at");
    assert!(at_stop > 0, "{out}");
    let later = lines(out, "stopped phase=");
    assert_eq!(later.len(), phases, "{out}");
    let mut p2 = num(later[0], "p2");
    for l in &later[1..] {
        assert_eq!(num(l, "p1"), at_stop, "{l}");
        assert_eq!(num(l, "p1_changed_buckets"), 0, "{l}");
        assert!(num(l, "p2") > p2, "{l}");
        p2 = num(l, "p2");
    }
}

/// Issue 40: a run's times came from five clocks started at different moments (profile.json's
/// `start_time` and `wall_time_s`, the timeline's zero and `start_unix_ns`, the process
/// table's `first_seen_s`), so a window cut by timeline times from the run's wall time was off
/// by the gap. Now one start: what holds for every host delay is that the timeline's start is
/// profile.json's `start_time` (to its millisecond) and that every time recorded (samples,
/// markers, processes' first and last samples) lies within `wall_time_s` of it.
#[test]
fn a_runs_times_came_from_five_clocks() {
    let dir = crate::harness::TempDir::new("one-clock");
    let out_dir = dir.join("out");
    let out = crate::harness::hvprof([
        "profile",
        "--timeline",
        "--cmdline",
        "scenario=phases",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ])
    .limit(LIMIT * 3)
    .run();
    out.assert_status(0);
    let p = report::read_profile(&out_dir.join("profile.json")).expect("the run's profile");
    let t = p.timelines.first().expect("the run's timeline");
    let start = std::time::SystemTime::UNIX_EPOCH + Duration::from_nanos(t.start_unix_ns);
    assert_eq!(
        vmm::clock::rfc3339(start),
        p.run.start_time,
        "the timeline's zero is not the run's start"
    );
    let wall_ns = p.run.wall_time_s * 1e9;
    #[allow(clippy::cast_precision_loss)]
    let within = |ns: u64| ns as f64 <= wall_ns;
    assert!(!t.samples.is_empty(), "no samples on the timeline");
    for s in &t.samples {
        assert!(
            within(s.t_ns),
            "a sample at {} ns, past the run's {wall_ns} ns",
            s.t_ns
        );
    }
    for m in &t.markers {
        assert!(
            within(m.end_ns),
            "a marker ends past the run: {m:?} ({wall_ns} ns)"
        );
    }
    assert!(!p.processes.is_empty(), "no process rows");
    for r in &p.processes {
        assert!(
            0.0 <= r.first_seen_s
                && r.first_seen_s <= r.last_seen_s
                && r.last_seen_s <= p.run.wall_time_s,
            "{} seen {}..{} s in a {} s run",
            r.name,
            r.first_seen_s,
            r.last_seen_s,
            p.run.wall_time_s
        );
    }
}

/// `hvprof profile` of the built-in guest with `extra`, into `out`, with no symbol path from
/// the environment.
fn profile_with(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["profile", "--quiet", "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    crate::harness::hvprof(args)
        .env("_NT_SYMBOL_PATH", "")
        .limit(LIMIT * 3)
        .run()
}

/// Issue 40: `--process NAME` where no guest process can ever be named (`--guest-os off`, or
/// no layout source at all: the built-in guest, a kernel without types) ran and exited 0 with
/// a host profile of 0 samples. Now refused before the run, naming the option and why.
#[test]
fn process_filter_without_a_layout_recorded_nothing_silently() {
    let dir = crate::harness::TempDir::new("process-no-layout");
    for (extra, why) in [
        (
            &["--process", "awk", "--guest-os", "off"][..],
            "--guest-os off",
        ),
        (&["--process", "awk"][..], "no guest kernel layout"),
    ] {
        let out_dir = dir.join("out");
        let out = profile_with(&out_dir, extra);
        out.assert_status(crate::harness::status::USAGE);
        out.assert_error_line(&["--process awk", "counts nothing", why]);
        assert!(!out_dir.join("profile.json").exists(), "{out}");
        out.assert_stdout_lacks("refguest: scenario");
    }
}

/// Issue 40: where a layout may come but never does (a symbol path for a Windows kernel the
/// built-in guest is not), the run goes on and ends with a warning, and the filter is saved
/// in profile.json and shown in report.txt instead of "all processes".
#[test]
fn process_filter_that_matched_nothing_is_said_and_saved() {
    let dir = crate::harness::TempDir::new("process-never");
    let symbols = dir.join("symbols");
    std::fs::create_dir_all(&symbols).unwrap();
    let out_dir = dir.join("out");
    let out = profile_with(
        &out_dir,
        &[
            "--process",
            "awk",
            "--symbol-path",
            symbols.to_str().unwrap(),
            "--duration",
            "1",
        ],
    );
    out.assert_status(0);
    out.assert_stderr_contains(
        "hvprof: warning: host profile 1 (--process awk) counted no sample: the guest kernel's layout was never found",
    );
    let p = report::read_profile(&out_dir.join("profile.json")).expect("the run's profile");
    let host = p
        .objects
        .iter()
        .find(|o| o.owner == report::ObjectOwner::Host)
        .expect("the host profile");
    assert_eq!(host.process_names, ["awk"]);
    let text = std::fs::read_to_string(out_dir.join("report.txt")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("profile object 1 (host)"))
        .unwrap_or_else(|| panic!("no host object in report.txt:\n{text}"));
    assert!(line.contains(", processes named awk, "), "{line}");
}
