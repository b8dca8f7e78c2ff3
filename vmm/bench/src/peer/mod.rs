//! `hvprof bench --peer`: what sampling costs the guest, hvprof against its peer, in one run.
//!
//! The reference guest's call-stack workload (`scenario=stacks`, CPL3 code on every vCPU for
//! `stacks.ms`) runs once per mode and round, and reports its own rate of work: calls of its
//! round function per second of its TSC. The modes:
//!
//! * `unprofiled`: nothing samples the guest (the baseline);
//! * `perf-kvm`: the events `perf kvm --guest record -e cpu-clock -c <period> -t <tid>` opens,
//!   opened on every vCPU thread ([`perf_kvm`]);
//! * `kernel`: hvprof's flat host profile (no stacks, no filter, `--guest-os off`) with
//!   `--sampler kernel`;
//! * `kick`: the same profile with `--sampler kick`.
//!
//! All sample the vCPU thread's CPU time (cpu-clock; `--clock cpu` for the kick path) at the
//! same rate, from the moment the guest prints its workload line. Each round runs every mode
//! once, each round starting one mode later and every other round backwards, so no mode
//! always follows the same one; a mode's slowdown is the median over the rounds of the same
//! round's unprofiled rate over its own. Where the kernel sampler or perf events are not
//! available to this user, that row says why and has no figures.

pub mod perf_kvm;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use profile_core::ProfileSource;
use vmm::config::{SerialOutput, SharedBuffer, VmConfig};
use vmm::profiler::host_profiles::guest_awareness::GuestTypes;
use vmm::profiler::host_profiles::HostProfileSpec;
use vmm::sampler::{Clock, SamplerChoice, SamplerMode};
use vmm::vm::{run_with, RunHooks, RunReport, VmControl, VmError};

/// The line the stacks scenario prints as its workload starts.
const START_LINE: &str = "refguest: stacks ms=";
/// Its per-process line of work done.
const WORK_LINE: &str = "refguest: stacks work ";

/// Why the comparison could not finish.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// A VM could not run.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// The guest did not report its work.
    #[error("the reference guest did not report its rate of work; its output:\n{0}")]
    Guest(String),
    /// A way of sampling could not run here (perf events closed to this user, the in-kernel
    /// sampler refused); its row says why.
    #[error("{0}")]
    Unavailable(String),
}

/// Parameters of the comparison.
#[derive(Clone, Debug)]
pub struct PeerOptions {
    /// Samples per second of a vCPU thread's CPU time.
    pub rate_hz: u32,
    /// How long the guest works in each run.
    pub work: Duration,
    /// Rounds (every mode once per round).
    pub rounds: usize,
    /// vCPUs, each running the workload.
    pub cpus: usize,
    /// Give up on a run after this long.
    pub timeout: Duration,
}

impl Default for PeerOptions {
    fn default() -> Self {
        PeerOptions {
            rate_hz: 10_000,
            work: Duration::from_secs(1),
            rounds: 3,
            cpus: 1,
            timeout: Duration::from_secs(120),
        }
    }
}

/// A way of sampling the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Nothing samples.
    Unprofiled,
    /// perf kvm's events on the vCPU threads.
    PerfKvm,
    /// hvprof's flat host profile, in-kernel samples.
    Kernel,
    /// hvprof's flat host profile, every sample a kick.
    Kick,
}

impl Mode {
    /// Every mode, in the first round's order.
    pub const ALL: [Mode; 4] = [Mode::Unprofiled, Mode::PerfKvm, Mode::Kernel, Mode::Kick];

    /// The name the report uses.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Unprofiled => "unprofiled",
            Mode::PerfKvm => "perf-kvm",
            Mode::Kernel => "kernel",
            Mode::Kick => "kick",
        }
    }
}

/// One mode's figures over the rounds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Row {
    /// The mode's name.
    pub mode: &'static str,
    /// Why the mode could not run here (then every figure is zero).
    pub unavailable: Option<String>,
    /// Runs measured.
    pub runs: usize,
    /// The guest's work: calls of its round function per second, summed over its vCPUs,
    /// median over the runs.
    pub work_per_s: f64,
    /// The same round's unprofiled rate over this mode's, median over the rounds (1.0 for the
    /// baseline; above 1 is slower).
    pub slowdown: f64,
    /// The vCPU threads' CPU time over the guest's work period (summed over vCPUs), median:
    /// below 1 where the host ran other threads on their CPUs.
    pub cpu_share: f64,
    /// The slowdown per second of the vCPU threads' CPU time instead of per second of the
    /// guest's clock: the same round's unprofiled work per CPU second over this mode's,
    /// median. It leaves out what the host's scheduling took from the vCPU threads (other
    /// load, the drain thread, perf's reader), and keeps what sampling costs on them.
    pub cpu_slowdown: f64,
    /// Samples attributed to guest code per run, median.
    pub samples: f64,
    /// That per second of the guest's work period.
    pub samples_per_s: f64,
    /// Samples over perf kvm's in the same round, median (null without perf kvm's row).
    pub of_peer_samples: f64,
    /// Samples of host time per run (an exit, or guest code the host emulates), median.
    pub host_samples: f64,
    /// Samples lost per run (a full ring; ticks coalesced into one kick), median.
    pub lost: f64,
    /// Kicks per run (exits hvprof forced out of KVM_RUN), median.
    pub kicks: f64,
}

/// What the comparison measured.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PeerReport {
    /// Samples per second of each vCPU thread's CPU time.
    pub rate_hz: u32,
    /// The guest's work period per run, in milliseconds.
    pub work_ms: u64,
    /// Rounds run.
    pub rounds: usize,
    /// vCPUs.
    pub cpus: usize,
    /// The host's one-minute load average before the first run (a shared host shows here).
    pub load_before: f64,
    /// The same after the last run.
    pub load_after: f64,
    /// One row per mode, in [`Mode::ALL`] order.
    pub rows: Vec<Row>,
}

impl PeerReport {
    /// The report as one JSON object (a ratio that is not a number is `null`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

/// One run's measurement.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    work_per_s: f64,
    /// The vCPU threads' CPU time while the guest worked, seconds.
    cpu_s: f64,
    samples: u64,
    host_samples: u64,
    lost: u64,
    kicks: u64,
}

/// Calls per second summed over the guest's work lines, or None without one.
fn parse_work(text: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut seen = false;
    for line in text.lines().filter_map(|l| l.strip_prefix(WORK_LINE)) {
        let field = |name: &str| crate::guest_line::field(line, name);
        let (calls, ticks, khz) = (field("calls")?, field("ticks")?, field("tsc_khz")?);
        if ticks <= 0.0 || khz <= 0.0 {
            return None;
        }
        total += calls / (ticks / (khz * 1000.0));
        seen = true;
    }
    seen.then_some(total)
}

/// The flat host profile hvprof's rows run: the whole space, no stacks, no filter.
fn flat_profile() -> HostProfileSpec {
    let mut spec = HostProfileSpec::whole_space();
    spec.stack_depth = 0;
    spec
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn kicks(report: &RunReport) -> u64 {
    report
        .vcpus
        .iter()
        .flat_map(|v| &v.exits)
        .filter(|(k, _)| k.name() == "kick")
        .map(|(_, n)| n)
        .sum()
}

/// Boots the guest once in `mode` and measures its rate of work and the samples taken.
fn run_once(mode: Mode, opts: &PeerOptions) -> Result<Run, PeerError> {
    let serial = SharedBuffer::default();
    let ms = opts.work.as_millis();
    let mut config = VmConfig::new(vmm::refguest::kernel_spec(&format!(
        "scenario=stacks stacks.ms={ms}"
    )));
    config.cpus = opts.cpus;
    config.serial = SerialOutput::Buffer(serial.clone());
    config.serial_input = false;
    config.timeout = Some(opts.timeout);
    config.clock = Some(Clock::Cpu);
    config.sampler = match mode {
        Mode::Kernel => SamplerChoice::Kernel,
        _ => SamplerChoice::Kick,
    };
    let mut hooks = RunHooks::default();
    let start_error = Arc::new(Mutex::new(None::<String>));
    if matches!(mode, Mode::Kernel | Mode::Kick) {
        // ProfileTime's interval is in 100 ns units.
        let interval = 10_000_000 / opts.rate_hz.max(1);
        hooks.interval = Some((ProfileSource::TIME, interval.max(1)));
        // `--guest-os off`: samples split by address space or named by thread need the
        // registers, so they would be kicks whatever the sampler (issue 42 item 3).
        hooks.guest_types = GuestTypes::Off;
        let (s, failed) = (serial.clone(), start_error.clone());
        hooks.controllers.push(Box::new(move |control: VmControl| {
            while !s.text().contains(START_LINE) {
                if control.stop.is_requested() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Err(e) = control.profiler.start_host_profile(flat_profile()) {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
            }
        }));
    }
    let period = (mode == Mode::PerfKvm).then(|| 1_000_000_000 / u64::from(opts.rate_hz.max(1)));
    let watcher = perf_kvm::Watcher::spawn(serial.clone(), START_LINE, period)
        .map_err(|e| PeerError::Unavailable(e.to_string()))?;
    let report = run_with(&config, hooks);
    let watched = watcher.finish();
    let report = report?;
    let text = serial.text();
    let work_per_s = parse_work(&text).ok_or(PeerError::Guest(text))?;
    let watched = watched.map_err(PeerError::Unavailable)?;
    let stats = vmm::profiler::vcpu_counters::total(&report.profile_stats);
    let mut run = Run {
        work_per_s,
        cpu_s: watched.cpu_ns as f64 / 1e9,
        kicks: kicks(&report),
        ..Run::default()
    };
    match mode {
        Mode::Unprofiled => {}
        Mode::PerfKvm => {
            let c = watched.peer.unwrap_or_default();
            (run.samples, run.host_samples, run.lost) = (c.guest, c.host, c.lost);
        }
        Mode::Kernel | Mode::Kick => {
            if let Some(e) = start_error.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(PeerError::Unavailable(format!(
                    "the host profile did not start: {e}"
                )));
            }
            if mode == Mode::Kernel && report.sampler != SamplerMode::Kernel {
                return Err(PeerError::Unavailable(
                    "the run fell back to kicks from --sampler kernel".into(),
                ));
            }
            run.samples = report.host_results.iter().map(|r| r.total()).sum();
            run.host_samples = stats.host_time;
            run.lost = stats.coalesced;
        }
    }
    Ok(run)
}

/// Why a mode cannot run on this host for this user, checked before the first round.
fn unavailable(mode: Mode) -> Option<String> {
    match mode {
        Mode::Kernel => vmm::sampler::selftest::run().err().map(|e| e.to_string()),
        _ => None,
    }
}

/// Runs the comparison on the bundled reference guest.
pub fn run(opts: &PeerOptions) -> Result<PeerReport, PeerError> {
    let load_before = load_average();
    let mut why: Vec<Option<String>> = Mode::ALL.iter().map(|m| unavailable(*m)).collect();
    // By round, by mode.
    let mut rounds: Vec<[Option<Run>; 4]> = Vec::with_capacity(opts.rounds);
    for round in 0..opts.rounds {
        let mut this = [None; 4];
        for i in 0..Mode::ALL.len() {
            // Each round starts one mode later, and every other round runs backwards, so no
            // mode always follows the same one (what a run leaves behind, such as memory the
            // host reclaims, falls on different modes).
            let n = Mode::ALL.len();
            let m = match (i + round) % n {
                m if round % 2 == 1 => n - 1 - m,
                m => m,
            };
            if why[m].is_some() {
                continue;
            }
            match run_once(Mode::ALL[m], opts) {
                Ok(r) => this[m] = Some(r),
                // perf events closed to this user, or the kernel sampler refused at run
                // time: the row says so; anything else ends the bench.
                Err(PeerError::Unavailable(e)) if Mode::ALL[m] != Mode::Unprofiled => {
                    why[m] = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        rounds.push(this);
    }
    let rows = Mode::ALL
        .iter()
        .enumerate()
        .map(|(m, mode)| match &why[m] {
            Some(w) => Row {
                mode: mode.name(),
                unavailable: Some(w.clone()),
                ..Row::default()
            },
            None => row(*mode, m, &rounds, opts.work),
        })
        .collect();
    Ok(PeerReport {
        rate_hz: opts.rate_hz,
        work_ms: u64::try_from(opts.work.as_millis()).unwrap_or(u64::MAX),
        rounds: opts.rounds,
        cpus: opts.cpus,
        load_before,
        load_after: load_average(),
        rows,
    })
}

/// The median of `v`, not a number when empty.
fn median_of(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `f(mode m's run, mode o's run)` for every round where both ran.
fn paired(
    rounds: &[[Option<Run>; 4]],
    m: usize,
    o: usize,
    f: impl Fn(&Run, &Run) -> f64,
) -> Vec<f64> {
    rounds
        .iter()
        .filter_map(|r| Some(f(r[m].as_ref()?, r[o].as_ref()?)))
        .collect()
}

fn row(mode: Mode, m: usize, rounds: &[[Option<Run>; 4]], work: Duration) -> Row {
    let done: Vec<Run> = rounds.iter().filter_map(|r| r[m]).collect();
    let med = |f: fn(&Run) -> f64| median_of(done.iter().map(f).collect());
    let samples = med(|r| r.samples as f64);
    Row {
        mode: mode.name(),
        unavailable: None,
        runs: done.len(),
        work_per_s: med(|r| r.work_per_s),
        slowdown: median_of(paired(rounds, m, 0, |r, b| b.work_per_s / r.work_per_s)),
        cpu_share: med(|r| r.cpu_s) / work.as_secs_f64(),
        cpu_slowdown: median_of(paired(rounds, m, 0, |r, b| {
            (b.work_per_s / b.cpu_s) / (r.work_per_s / r.cpu_s)
        })),
        samples,
        samples_per_s: samples / work.as_secs_f64(),
        of_peer_samples: median_of(paired(rounds, m, 1, |r, p| {
            r.samples as f64 / p.samples as f64
        })),
        host_samples: med(|r| r.host_samples as f64),
        lost: med(|r| r.lost as f64),
        kicks: med(|r| r.kicks as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_s_work_lines_add_up() {
        let text = "refguest: stacks ms=500 cpus=2\n\
                    refguest: stacks work pid=0 calls=1000 ticks=2000000 tsc_khz=2000000\n\
                    refguest: stacks work pid=1 calls=500 ticks=1000000 tsc_khz=2000000\n";
        // 1000 calls in 1 ms and 500 in 0.5 ms: 1,000,000 calls a second each.
        assert_eq!(parse_work(text), Some(2_000_000.0));
        assert_eq!(parse_work("refguest: stacks ms=500 cpus=2\n"), None);
        assert_eq!(
            parse_work("refguest: stacks work pid=0 calls=1 ticks=0 tsc_khz=2000000\n"),
            None
        );
    }

    #[test]
    fn ratios_pair_the_same_round() {
        let r = |w: f64| {
            Some(Run {
                work_per_s: w,
                ..Run::default()
            })
        };
        let rounds = [
            [r(100.0), None, r(50.0), None],
            [r(200.0), None, None, None],
            [None, None, r(10.0), None],
        ];
        let v = paired(&rounds, 2, 0, |m, b| b.work_per_s / m.work_per_s);
        assert_eq!(v, [2.0]);
        assert_eq!(median_of(vec![3.0, f64::NAN, 1.0, 2.0, 10.0]), 2.5);
        assert!(median_of(Vec::new()).is_nan());
    }
}
