//! Sample sources: ProfileTime on the vCPU threads' CPU time against the wall clock on a
//! loaded host, a host-side profile taken through perf-event overflows, and the PMU profile
//! sources a guest is offered being exactly what the probe found.
//!
//! This host has no PMU: every hardware event is absent here, and the tests check that a
//! guest and a user are told so as Windows would tell them. On a host with a PMU the same
//! tests check that the present sources can be created.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{hvprof, hvprof_run, Output, TempDir, REFGUEST_PASS};

const LIMIT: Duration = Duration::from_secs(120);

/// `hvprof events --json`.
fn events() -> serde_json::Value {
    let out = hvprof(["events", "--json"]).run();
    out.assert_status(0);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{out}"))
}

/// Whether this user may open perf events on its threads; root always may, so a host where
/// root cannot fails rather than skips.
fn perf_available(events: &serde_json::Value) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let available = events["cpu_clock_unavailable"].is_null();
    assert!(available || !root, "root cannot use perf here: {events}");
    if !available {
        eprintln!(
            "perf events are closed to this user: {}",
            events["cpu_clock_unavailable"]
        );
    }
    available
}

/// `N samples (... L lost ...)` of the run's profiling summary.
fn samples_and_lost(out: &Output) -> (u64, u64) {
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("profiling: "))
        .unwrap_or_else(|| panic!("no profiling summary\n{out}"));
    let number_before = |word: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let i = words
            .iter()
            .position(|w| *w == word)
            .unwrap_or_else(|| panic!("{line}"));
        words[i - 1]
            .trim_start_matches('(')
            .parse()
            .unwrap_or_else(|_| panic!("{line}"))
    };
    (number_before("samples"), number_before("lost"))
}

/// The guest's own counts of f1, f2, f4 (`refguest: shares fn=fN ... count=C`).
fn shares(out: &Output) -> [u64; 3] {
    ["f1", "f2", "f4"].map(|f| {
        let prefix = format!("refguest: shares fn={f} ");
        let line = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no share line for {f}\n{out}"));
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("count="))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    })
}

/// Threads that keep every host CPU busy until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(threads: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn demo(clock: &str) -> Output {
    let out = hvprof(["demo", "--cpus", "2", "--clock", clock])
        .limit(LIMIT)
        .run();
    out.assert_status(0);
    out
}

#[test]
fn the_cpu_clock_loses_no_samples_to_host_load() {
    if !perf_available(&events()) {
        return;
    }
    // Two busy vCPUs and two busy host threads on this host's CPUs: the host cannot run
    // every vCPU thread whenever its wall-clock timer fires.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (wall, cpu) = {
        let _load = Load::start(cpus);
        (demo("wall"), demo("cpu"))
    };
    let ((ws, wl), (cs, cl)) = (samples_and_lost(&wall), samples_and_lost(&cpu));
    let pct = |l: u64, s: u64| 100.0 * l as f64 / (s + l).max(1) as f64;
    eprintln!(
        "--clock wall: {ws} samples, {wl} lost ({:.2}%); --clock cpu: {cs} samples, {cl} lost ({:.2}%)",
        pct(wl, ws),
        pct(cl, cs)
    );
    // What the wall clock loses depends on how the host scheduled the threads, so only the
    // CPU clock's bound is asserted: it ticks only while its vCPU thread runs.
    assert!(cs >= 200, "too few samples\n{cpu}");
    assert!(
        cl * 100 <= cs + cl,
        "--clock cpu lost {cl} of {}\n{cpu}",
        cs + cl
    );
    // Each share within 3 points of 1:2:4, or within 5 standard deviations of binomial noise
    // when fewer samples arrived than make 3 points that safe (the rule of profiling.rs).
    let counts = shares(&cpu);
    let total: u64 = counts.iter().sum();
    for (count, weight) in counts.iter().zip([1.0, 2.0, 4.0]) {
        let (share, ideal) = (*count as f64 / total as f64, weight / 7.0);
        let tolerance = (5.0 * (ideal * (1.0 - ideal) / total as f64).sqrt()).max(0.03);
        eprintln!("--clock cpu: share {share:.4} (ideal {ideal:.4}, tolerance {tolerance:.4})");
        assert!(
            (share - ideal).abs() <= tolerance,
            "share {share:.4} vs {ideal:.4}\n{cpu}"
        );
    }
    cpu.assert_stdout_contains("on the vCPU threads' CPU-time clock");
    wall.assert_stdout_contains("on the wall clock");
}

#[test]
fn a_host_profile_on_cpu_clock_is_taken_through_perf_overflows() {
    if !perf_available(&events()) {
        return;
    }
    let dir = TempDir::new("sampling-event");
    let out_dir = dir.join("out");
    let out = hvprof([
        "profile",
        "--event",
        "cpu-clock",
        "--out",
        out_dir.to_str().unwrap(),
        "--quiet",
        "--serial",
        "null",
    ])
    .limit(LIMIT)
    .run();
    out.assert_status(0);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("profile.json")).unwrap())
            .unwrap();
    let objects = json["objects"].as_array().unwrap();
    let host = objects
        .iter()
        .find(|o| o["owner"] == "host")
        .unwrap_or_else(|| panic!("no host object: {json}"));
    // Only cpu-clock overflows count in it: nothing else arms that event.
    assert_eq!(
        (host["source"].as_u64(), host["source_name"].as_str()),
        (Some(0), Some("cpu-clock"))
    );
    assert!(host["total"].as_u64().unwrap() >= 100, "{host}");
    let names: Vec<&str> = host["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    for f in ["shares_f1", "shares_f2", "shares_f4"] {
        assert!(names.iter().any(|n| n.ends_with(f)), "{f} not in {names:?}");
    }
    let report = std::fs::read_to_string(out_dir.join("report.txt")).unwrap();
    assert!(report.contains("cpu-clock"), "{report}");
}

#[test]
fn absent_and_unknown_events_are_user_errors() {
    let events = events();
    let unknown = hvprof([
        "profile",
        "--event",
        "cycels",
        "--out",
        "/nonexistent",
        "--quiet",
    ])
    .run();
    unknown.assert_status(2);
    unknown.assert_error_line(&["unknown event", "cycels", "hvprof events"]);
    let absent = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["present"] == false);
    let Some(absent) = absent else {
        eprintln!("every event is present here");
        return;
    };
    let name = absent["name"].as_str().unwrap();
    let why = absent["why"].as_str().unwrap();
    let out = hvprof([
        "profile",
        "--event",
        name,
        "--out",
        "/nonexistent",
        "--quiet",
    ])
    .run();
    out.assert_status(2);
    out.assert_error_line(&[name, "cannot be sampled here", why]);
}

#[test]
fn the_guest_is_offered_exactly_the_sources_the_probe_found() {
    let events = events();
    let probed = events["supported_sources"].as_u64().unwrap();
    let elf = Path::new(env!("HVPROF_REFGUEST_ELF"));
    let out = hvprof_run(elf, &["--cmdline", "scenario=sources"])
        .limit(LIMIT)
        .run();
    out.assert_debug_exit(REFGUEST_PASS);
    out.assert_stdout_lacks(" BAD");
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("refguest: sources bitmap="))
        .unwrap_or_else(|| panic!("no bitmap line\n{out}"));
    let bitmap = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("bitmap=0x"))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap();
    assert_eq!(bitmap, probed, "{line}");
    // Every generic source was answered: offered ones created, the others NOT_SUPPORTED
    // with interval 0, as Windows answers for a source its HAL lacks.
    for s in 2..0x18u64 {
        let l = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("refguest: sources source={s} ")))
            .unwrap_or_else(|| panic!("no line for source {s}\n{out}"));
        if probed & (1 << s) == 0 {
            assert!(l.contains("create=0xc00000bb interval=0 ok"), "{l}");
        } else {
            assert!(l.contains("create=0x00000000 interval=1000000 ok"), "{l}");
        }
    }
}
