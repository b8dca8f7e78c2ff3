//! `hvprof bench`: the costs of hvprof's two hot paths, each against a baseline measured in the
//! same run on the same host, so the ratios mean something on any machine.
//!
//! * Sample path. The reference guest (`scenario=bench`) starts a profile over a CPL3 spin
//!   loop and spins. A controller thread signals vCPU 0 and times how long until the vCPU is
//!   back in KVM_RUN: with the kick signal (the bare baseline: out of KVM_RUN and straight back
//!   in) and with the sampling-timer signal (hvprof's full sample path: the tick, the overrun
//!   count, the registers, attribution under the read lock, the counter increments in guest
//!   memory and the VMM's copy). A third kind adds a host-side profile that walks each
//!   sample's call stack (the guest spins 16 frame-pointer frames deep). The kinds alternate
//!   in rounds; medians are compared. A fourth kind is the perf-overflow path: a host-side
//!   profile on the task-clock event, and the controller queues the overflow signal naming
//!   that event's descriptor on vCPU 0 (everything after the kernel's own overflow handling:
//!   the handler's lookup of the event, the trigger's sample, the host profile's count). A
//!   second VM does the same spinning 16 frames deep in a
//!   PE image without frame pointers ([`pe`]), for the cost of Windows x64 unwinding.
//! * Hypercall path. The guest times, with RDTSC at CPL0, a bare port-I/O exit (OUT to an
//!   unclaimed port) and a full hypercall round trip (QUERY_INTERVAL rung through the
//!   doorbell), minus the measurement's own overhead.
//! * Disk path (`hvprof bench --disk`, [`disk`]): 4 KiB reads from a qcow2 image against the
//!   same data in a raw image, through the device's request path.
//!
//! The VMM carries nothing of this: the timings go through the run's observer hook
//! ([`vmm::vcpu::observer::VcpuObserver`], [`observer`]), which a production run leaves empty.
#![warn(missing_docs)]

pub mod disk;
mod guest_line;
pub mod naming;
mod observer;
pub mod pe;
pub mod peer;
mod quantiles;

use std::sync::Arc;
use std::time::{Duration, Instant};

use observer::EntryObserver;
use quantiles::{median, median_f64, percentile};
use vmm::arch::cpu_state::CpuState;
use vmm::config::{SerialOutput, SharedBuffer, VmConfig};
use vmm::outcome::RunOutcome;
use vmm::profiler::host_profiles::stacks::StackWalker;
use vmm::profiler::host_profiles::HostProfileSpec;
use vmm::sampler::events::TASK_CLOCK;
use vmm::signals::{kick_signal, overflow_signal, tick_signal};
use vmm::vm::{run_with, RunHooks, VmControl, VmError};

/// Samples the recorder takes in [`timeline_record_ns`].
const TIMELINE_SAMPLES: usize = 200_000;

/// The timeline recorder's work for one sample, as a timeline-recording host profile does it
/// on the sample path (the clock read, the vCPU's buffer, the stack interned), mean ns.
fn timeline_record_ns(samples: usize) -> f64 {
    use vmm::profiler::timeline::Timelines;
    let t = Timelines::new(1);
    t.profile_started();
    let stacks: Vec<Vec<u64>> = (0..64u64)
        .map(|i| {
            (0..16u64)
                .map(|f| 0x4000_0000 + i * 0x40 + f * 0x1000)
                .collect()
        })
        .collect();
    let start = Instant::now();
    for (i, stack) in stacks.iter().cycle().take(samples).enumerate() {
        let now = t.now_ns();
        t.sample(0, 1, now, 3, Some(u32::try_from(i % 7).unwrap_or(0)), stack);
    }
    let ns = start.elapsed().as_nanos() as f64;
    std::hint::black_box(&t);
    ns / samples.max(1) as f64
}

/// Identifications timed in each mix of [`naming`].
const NAMING_SAMPLES: usize = 200_000;

/// Benchmark parameters.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Kicks of each kind per round.
    pub kicks: usize,
    /// Rounds (the kinds alternate, each round in the opposite order).
    pub rounds: usize,
    /// Pause between kicks, so the guest runs between them.
    pub gap: Duration,
    /// Give up on the guest after this long.
    pub timeout: Duration,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            kicks: 500,
            rounds: 6,
            gap: Duration::from_micros(200),
            timeout: Duration::from_secs(120),
        }
    }
}

/// What the benchmark measured. Times in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct BenchReport {
    /// Full sample path / bare kick, medians.
    pub sample_ratio: f64,
    /// Full sample path with a frame-pointer stack walk / bare kick, medians.
    pub stack_ratio: f64,
    /// The same host profile recording a timeline (issue 32) / the same without, medians,
    /// same run.
    pub timeline_ratio: f64,
    /// The sample path with the stack walk and the timeline to re-entry, median.
    pub kick_timeline_ns: f64,
    /// The recorder's own work per sample (`Timelines::sample` with its clock read, a
    /// 16-frame stack among 64 distinct ones), timed off the vCPU over 200,000 samples, mean.
    pub timeline_record_ns: f64,
    /// (Stack path + `timeline_record_ns`) / stack path: the timeline's cost without the
    /// host's noise in it.
    pub timeline_record_ratio: f64,
    /// Perf-overflow sample path (a host profile on task-clock) / bare kick, medians; not a
    /// number where perf events are closed to the user.
    pub perf_ratio: f64,
    /// Perf-overflow sample path to re-entry, median.
    pub kick_perf_ns: f64,
    /// Full hypercall / bare port-I/O exit, medians net of measurement overhead.
    pub hypercall_ratio: f64,
    /// (Full sample path + naming the sample's guest process and thread, the thread changing
    /// every 16 samples) / full sample path ([`naming`]).
    pub naming_ratio: f64,
    /// The same with the thread changing at every sample.
    pub naming_worst_ratio: f64,
    /// Naming per sample, the thread changing every 16 samples, mean.
    pub naming_ns: f64,
    /// Naming per sample, the thread changing at every sample, mean.
    pub naming_worst_ns: f64,
    /// Bare kick to re-entry, median.
    pub kick_bare_ns: f64,
    /// Full sample path to re-entry, median.
    pub kick_full_ns: f64,
    /// Full sample path with the stack walk to re-entry, median.
    pub kick_stack_ns: f64,
    /// Frames per walked stack (the sampled PC included), mean over the walks.
    pub stack_frames: f64,
    /// The frame-pointer walk inside a sample, timed around the walk on the vCPU's thread,
    /// per frame, median over the walks.
    pub ns_per_frame: f64,
    /// The same walk repeated on another thread right after, warm, per frame, median.
    pub alone_ns_per_frame: f64,
    /// `ns_per_frame` / `alone_ns_per_frame`: what being inside a sample costs the walk.
    pub walk_ratio: f64,
    /// Full sample path with a Windows x64 unwind of the guest's PE frames / bare kick,
    /// medians, in a second VM with its own baseline.
    pub unwind_ratio: f64,
    /// That VM's bare kick, median.
    pub kick_unwind_bare_ns: f64,
    /// Its sample path with the x64 unwind, median.
    pub kick_unwind_ns: f64,
    /// Frames per unwound stack, mean.
    pub unwind_frames: f64,
    /// The x64 unwind inside a sample, per frame, median (as `ns_per_frame`).
    pub ns_per_unwind_frame: f64,
    /// The same unwind repeated alone, per frame, median.
    pub alone_ns_per_unwind_frame: f64,
    /// `ns_per_unwind_frame` / `alone_ns_per_unwind_frame`.
    pub unwind_walk_ratio: f64,
    /// 90th percentiles of the same.
    pub kick_bare_p90_ns: f64,
    /// 90th percentile of the full path.
    pub kick_full_p90_ns: f64,
    /// Bare port-I/O exit round trip, as the guest sees it.
    pub io_exit_ns: f64,
    /// Hypercall round trip, as the guest sees it.
    pub hypercall_ns: f64,
    /// Kicks measured of each kind.
    pub kicks: usize,
    /// Kicks that did not come back within the limit (not counted).
    pub kicks_timed_out: usize,
    /// Samples the VMM took during the run (the full-path kicks plus timer ticks).
    pub samples: u64,
}

impl BenchReport {
    /// The report as a JSON object (a ratio that is not a number is `null`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
    }
}

/// Why the benchmark could not finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The VM could not run.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// The PE image for the unwind session could not be written.
    #[error("cannot write the benchmark's PE image")]
    Module(#[source] std::io::Error),
    /// The guest did not report what the benchmark needs.
    #[error("the reference guest did not {0}; its output:\n{1}")]
    Guest(&'static str, String),
}

/// The guest's hypercall timing line.
#[derive(Clone, Copy, Debug, PartialEq)]
struct GuestTimes {
    empty: f64,
    io: f64,
    hypercall: f64,
    tsc_khz: f64,
}

fn parse_guest_times(text: &str) -> Option<GuestTimes> {
    let line = text
        .lines()
        .find(|l| l.starts_with("refguest: bench hypercall "))?;
    let field = |name: &str| guest_line::field(line, name);
    Some(GuestTimes {
        empty: field("empty_cycles")?,
        io: field("io_cycles")?,
        hypercall: field("hypercall_cycles")?,
        tsc_khz: field("tsc_khz").filter(|k| *k > 0.0)?,
    })
}

/// Waits until `cond` holds on the guest's output, the run ends, or `deadline` passes.
fn wait_for(
    serial: &SharedBuffer,
    control: &VmControl,
    deadline: Instant,
    cond: impl Fn(&str) -> bool,
) -> bool {
    while Instant::now() < deadline && !control.stop.is_requested() {
        if cond(&serial.text()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// How the controller makes vCPU 0 leave the guest.
#[derive(Clone, Copy)]
enum Send {
    /// A plain signal.
    Signal(i32),
    /// A queued signal with a value.
    Queue(i32, i32),
}

/// Signals vCPU 0 and returns the time until it re-entered the guest.
fn time_one(control: &VmControl, stamp: &EntryObserver, send: Send) -> Option<u64> {
    let vcpu = &control.vcpus[0];
    let t0 = stamp.now_ns();
    match send {
        Send::Signal(sig) => vcpu.signal(sig),
        Send::Queue(sig, value) => vcpu.queue_signal(sig, value),
    };
    let limit = Instant::now() + Duration::from_millis(50);
    loop {
        let last = stamp.last();
        if last > t0 {
            return Some(last - t0);
        }
        if Instant::now() > limit {
            return None;
        }
        std::hint::spin_loop();
    }
}

/// What one batch of kicks exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Out of KVM_RUN and back.
    Bare,
    /// The sample path.
    Full,
    /// The sample path with a host profile that walks the call stack.
    Stack,
    /// The perf-overflow sample path, for a host profile on the task clock.
    Perf,
    /// `Stack` with the profile recording a timeline.
    Timeline,
}

/// Kick timings per kind, how many timed out, and the frames the walks found.
#[derive(Default)]
struct Timings {
    bare: Vec<u64>,
    full: Vec<u64>,
    stack: Vec<u64>,
    perf: Vec<u64>,
    timeline: Vec<u64>,
    lost: usize,
    frames: u64,
    walks: u64,
    /// Each stack-kind sample's walk, ns per frame, as the vCPU's thread timed it.
    walk_in_sample: Vec<f64>,
    /// The last of those walks repeated on the controller's thread, ns per frame.
    walk_alone: Vec<f64>,
}

/// Repeats the walk from `cpu` `n` times on this thread with a walker of its own (its plans
/// made by a first walk, as the vCPU's were by its first samples); ns per frame of each.
fn walk_alone(mem: &vm_memory::GuestMemoryMmap, cpu: &CpuState, n: usize) -> Vec<f64> {
    let depth = stack_profile().stack_depth;
    let mut walker = StackWalker::default();
    std::hint::black_box(walker.walk(mem, cpu, depth));
    (0..n)
        .map(|_| {
            let t0 = Instant::now();
            let stack = std::hint::black_box(walker.walk(mem, cpu, depth));
            t0.elapsed().as_nanos() as f64 / stack.pcs.len().max(1) as f64
        })
        .collect()
}

/// A host profile of the spinning user code keeping 64 frames per sample.
fn stack_profile() -> HostProfileSpec {
    let mut spec = HostProfileSpec::whole_space();
    spec.cpl = Some(3);
    spec.vcpus = Some(vec![0]);
    spec
}

/// [`stack_profile`] recording a timeline.
fn timeline_profile() -> HostProfileSpec {
    let mut spec = stack_profile();
    spec.timeline = true;
    spec
}

/// A host profile of the spinning user code on the task clock, without stacks.
fn perf_profile() -> HostProfileSpec {
    let mut spec = stack_profile();
    spec.stack_depth = 0;
    spec.event = Some(TASK_CLOCK.to_string());
    spec
}

/// The descriptor of vCPU 0's task-clock event, where perf is open to the user.
fn task_clock_fd(control: &VmControl, stamp: &EntryObserver) -> Option<i32> {
    let sampling = control.profiler.sampling();
    let t = (0..sampling.len()).find(|t| sampling.name(*t) == TASK_CLOCK)?;
    stamp.trigger_fd(0, t)
}

fn measure_kicks(control: &VmControl, stamp: &EntryObserver, opts: &BenchOptions) -> Timings {
    let mut t = Timings::default();
    let perf_fd = task_clock_fd(control, stamp);
    let mut kinds = vec![Kind::Bare, Kind::Full, Kind::Stack, Kind::Timeline];
    if perf_fd.is_some() {
        kinds.push(Kind::Perf);
    }
    for round in 0..opts.rounds {
        for i in 0..kinds.len() {
            // Each round starts one kind later, so no kind always follows the same one.
            let kind = kinds[(i + round) % kinds.len()];
            let profile = match kind {
                Kind::Stack => control.profiler.start_host_profile(stack_profile()).ok(),
                Kind::Perf => control.profiler.start_host_profile(perf_profile()).ok(),
                Kind::Timeline => control.profiler.start_host_profile(timeline_profile()).ok(),
                _ => None,
            };
            let send = match (kind, perf_fd) {
                (Kind::Bare, _) => Send::Signal(kick_signal()),
                (Kind::Perf, Some(fd)) => Send::Queue(overflow_signal(), fd),
                _ => Send::Signal(tick_signal()),
            };
            if kind == Kind::Stack {
                stamp.record_walks();
            }
            for _ in 0..opts.kicks {
                if control.stop.is_requested() {
                    break;
                }
                match (time_one(control, stamp, send), kind) {
                    (Some(ns), Kind::Bare) => t.bare.push(ns),
                    (Some(ns), Kind::Full) => t.full.push(ns),
                    (Some(ns), Kind::Stack) => t.stack.push(ns),
                    (Some(ns), Kind::Perf) => t.perf.push(ns),
                    (Some(ns), Kind::Timeline) => t.timeline.push(ns),
                    (None, _) => t.lost += 1,
                }
                std::thread::sleep(opts.gap);
            }
            if let Some(id) = profile {
                let _ = control.profiler.stop_host_profile(id);
                if kind != Kind::Stack {
                    continue; // frames per walk are the stack kind's
                }
                let walks = stamp.take_walks();
                t.walk_in_sample.extend(walks.ns_per_frame);
                if let Some((mem, cpu, _)) = walks.last {
                    // The guest still spins in the same frames: the same walk, warm, alone.
                    t.walk_alone.extend(walk_alone(&mem, &cpu, opts.kicks));
                }
                if let Some(r) = control.profiler.host_result(id) {
                    for (k, n) in &r.stacks.stacks {
                        t.frames += k.pcs.len() as u64 * n;
                        t.walks += n;
                    }
                }
            }
        }
    }
    t
}

/// One VM's measurements: the kick timings, the guest's output, samples taken.
struct Session {
    timings: Timings,
    text: String,
    samples: u64,
}

/// Boots the reference guest with `cmdline` (and `module` as module 0) and times kicks of
/// every kind once it spins.
fn session(
    opts: &BenchOptions,
    cmdline: &str,
    module: Option<std::path::PathBuf>,
) -> Result<Session, BenchError> {
    let serial = SharedBuffer::default();
    let mut spec = vmm::refguest::kernel_spec(cmdline);
    spec.initrd = module;
    let mut config = VmConfig::new(spec);
    config.serial = SerialOutput::Buffer(serial.clone());
    config.serial_input = false;
    config.timeout = Some(opts.timeout);
    // What is timed is the kick's sample path: the signal the controller sends must take it,
    // whatever the host's in-kernel sampler could do.
    config.sampler = vmm::sampler::SamplerChoice::Kick;
    let stamp = Arc::new(EntryObserver::default());
    let result = Arc::new(std::sync::Mutex::new(None));

    let (o, s, r, stamp2) = (opts.clone(), serial.clone(), result.clone(), stamp.clone());
    let controller = Box::new(move |control: VmControl| {
        let deadline = Instant::now() + o.timeout;
        let ready = wait_for(&s, &control, deadline, |t| {
            parse_guest_times(t).is_some() && t.contains("refguest: bench profile started")
        });
        if ready {
            std::thread::sleep(Duration::from_millis(100));
            let timings = measure_kicks(&control, &stamp2, &o);
            *r.lock().unwrap_or_else(|e| e.into_inner()) = Some(timings);
        }
        control
            .stop
            .request(RunOutcome::Stopped("hvprof bench".into()));
    });
    let report = run_with(
        &config,
        RunHooks {
            observer: Some(stamp),
            controllers: vec![controller],
            ..Default::default()
        },
    )?;
    let text = serial.text();
    let timings = result
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or_else(|| BenchError::Guest("start its profile and spin", text.clone()))?;
    if timings.bare.is_empty()
        || timings.full.is_empty()
        || timings.stack.is_empty()
        || timings.timeline.is_empty()
    {
        return Err(BenchError::Guest(
            "keep running while the kicks were timed",
            text,
        ));
    }
    if timings.walks == 0 || timings.frames < timings.walks * 2 {
        // A sample path that walked no stack was not the one the figures are about.
        return Err(BenchError::Guest(
            "spin in frames the stack profile walked",
            text,
        ));
    }
    Ok(Session {
        timings,
        text,
        samples: vmm::profiler::vcpu_counters::total(&report.profile_stats).samples,
    })
}

/// The x64-unwind session: the guest spins inside [`pe::deep_module`], handed over as a
/// file for the run's length.
fn unwind_session(opts: &BenchOptions) -> Result<Session, BenchError> {
    let path = std::env::temp_dir().join(format!("hvprof-bench-{}.exe", std::process::id()));
    // Through the atomic writer: a name in a shared /tmp is never opened for writing, so a
    // symlink planted at it cannot redirect the write.
    files::atomic::write(&path, files::atomic::Naming::InDir, &pe::deep_module())
        .map_err(|e| BenchError::Module(e.into_io()))?;
    let result = session(opts, "scenario=bench bench.pe=1", Some(path.clone()));
    let _ = std::fs::remove_file(&path);
    result
}

/// Runs the benchmark on the bundled reference guest: once spinning in frame-pointer code,
/// once in a PE image's frames (each VM with its own same-run baseline).
pub fn run(opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    let fp = session(opts, "scenario=bench", None)?;
    let x64 = unwind_session(opts)?;
    let times = parse_guest_times(&fp.text)
        .ok_or_else(|| BenchError::Guest("report its hypercall timings", fp.text.clone()))?;
    let t = &fp.timings;
    let u = &x64.timings;
    let ns_per_cycle = 1e6 / times.tsc_khz;
    let io_net = (times.io - times.empty).max(1.0);
    let hc_net = (times.hypercall - times.empty).max(1.0);
    let (kb, kf, ks) = (median(&t.bare), median(&t.full), median(&t.stack));
    // Where perf is closed to the user the kind did not run: not a number (null in JSON).
    let kp = if t.perf.is_empty() {
        f64::NAN
    } else {
        median(&t.perf)
    };
    let (ub, us) = (median(&u.bare), median(&u.stack));
    // Each walk's ns per frame, in the sample and repeated alone, medians.
    let (walk_in, walk_out) = (median_f64(&t.walk_in_sample), median_f64(&t.walk_alone));
    let (unwind_in, unwind_alone) = (median_f64(&u.walk_in_sample), median_f64(&u.walk_alone));
    let naming = naming::measure(NAMING_SAMPLES);
    let record_ns = timeline_record_ns(TIMELINE_SAMPLES);
    let frames = t.frames as f64 / t.walks.max(1) as f64;
    let unwind_frames = u.frames as f64 / u.walks.max(1) as f64;
    Ok(BenchReport {
        sample_ratio: kf / kb,
        stack_ratio: ks / kb,
        timeline_ratio: median(&t.timeline) / ks,
        kick_timeline_ns: median(&t.timeline),
        timeline_record_ns: record_ns,
        timeline_record_ratio: (ks + record_ns) / ks,
        perf_ratio: kp / kb,
        kick_perf_ns: kp,
        unwind_ratio: us / ub,
        hypercall_ratio: hc_net / io_net,
        naming_ratio: (kf + naming.every_16_ns) / kf,
        naming_worst_ratio: (kf + naming.every_sample_ns) / kf,
        naming_ns: naming.every_16_ns,
        naming_worst_ns: naming.every_sample_ns,
        kick_bare_ns: kb,
        kick_full_ns: kf,
        kick_stack_ns: ks,
        stack_frames: frames,
        ns_per_frame: walk_in,
        alone_ns_per_frame: walk_out,
        walk_ratio: walk_in / walk_out,
        kick_unwind_bare_ns: ub,
        kick_unwind_ns: us,
        unwind_frames,
        ns_per_unwind_frame: unwind_in,
        alone_ns_per_unwind_frame: unwind_alone,
        unwind_walk_ratio: unwind_in / unwind_alone,
        kick_bare_p90_ns: percentile(&t.bare, 90),
        kick_full_p90_ns: percentile(&t.full, 90),
        io_exit_ns: io_net * ns_per_cycle,
        hypercall_ns: hc_net * ns_per_cycle,
        kicks: t.bare.len().min(t.full.len()).min(t.stack.len()),
        kicks_timed_out: t.lost + u.lost,
        samples: fp.samples + x64.samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_times_line_is_parsed() {
        let text = "refguest: boot\nrefguest: bench hypercall empty_cycles=100 io_cycles=2100 \
                    hypercall_cycles=2300 tsc_khz=2000000 n=2000\n";
        let t = parse_guest_times(text).unwrap();
        assert_eq!(
            t,
            GuestTimes {
                empty: 100.0,
                io: 2100.0,
                hypercall: 2300.0,
                tsc_khz: 2e6
            }
        );
        assert_eq!(
            parse_guest_times("refguest: bench hypercall io_cycles=1"),
            None
        );
    }
}
