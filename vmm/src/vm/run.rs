//! Running a VM to its outcome: start the vCPUs, run the event loop, stop and join, report.

use std::sync::Arc;
use std::time::Duration;

use super::event_loop::{run_until_stopped, LoopParams};
use super::uptime::Uptime;
use super::{Vm, VmError};
use crate::boot::Protocol;
use crate::clock::RunClock;
use crate::config::VmConfig;
use crate::outcome::{RunOutcome, StopSignal};
use crate::profiler::host_profiles::guest_awareness::GuestTypes;
use crate::profiler::host_profiles::{HostProfileResult, HostProfileSpec};
use crate::profiler::vcpu_counters::{total, StatsSnapshot};
use crate::profiler::ObjectResult;
use crate::profiler::Profiler;
use crate::seccomp::{install, ThreadKind};
use crate::signals::{self, StopSignals};
use crate::vcpu::exit_counters::{ExitCounters, ExitKind};
use crate::vcpu::observer::VcpuObserver;
use crate::vcpu::{Request, VcpuRequester};
use report::symbols::guest_files::GuestFiles;

/// One vCPU's exits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VcpuSummary {
    /// vCPU index.
    pub index: usize,
    /// Exit counts by kind, in `ExitKind::ALL` order.
    pub exits: Vec<(ExitKind, u64)>,
    /// Accesses no device claimed.
    pub unclaimed: u64,
}

impl VcpuSummary {
    fn from_counters(index: usize, c: &ExitCounters) -> Self {
        VcpuSummary {
            index,
            exits: ExitKind::ALL.iter().map(|k| (*k, c.get(*k))).collect(),
            unclaimed: c.unclaimed(),
        }
    }
}

/// How a run went.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Why it ended.
    pub outcome: RunOutcome,
    /// The boot protocol used.
    pub protocol: Protocol,
    /// The run's start, which every time recorded counts from.
    pub start: RunClock,
    /// Wall time from the run's start to the end of the last vCPU thread.
    pub wall_time: Duration,
    /// Per-vCPU exit counts.
    pub vcpus: Vec<VcpuSummary>,
    /// Per-vCPU profiling counters.
    pub profile_stats: Vec<StatsSnapshot>,
    /// Every profile object that ran, with the counts the VMM kept.
    pub results: Vec<ObjectResult>,
    /// Every host-side profile, with its counts.
    pub host_results: Vec<HostProfileResult>,
    /// The PE images found in guest memory by host-profile sampling.
    pub guest_modules: Vec<crate::profiler::host_profiles::FoundModule>,
    /// The guest's processes host-side samples ran in (rows of the run's process table).
    pub processes: Vec<report::profile::ProcessInfo>,
    /// The guest's threads host-side samples ran in.
    pub threads: Vec<report::profile::ThreadInfo>,
    /// The ProfileTime interval in force at the end, in 100 ns units.
    pub interval_100ns: u32,
    /// What ProfileTime ticked on.
    pub clock: crate::sampler::Clock,
    /// How samples were taken.
    pub sampler: crate::sampler::SamplerMode,
    /// The timelines of the host profiles started with one (`profiler::timeline`).
    pub timelines: Vec<report::timeline::Timeline>,
}

impl RunReport {
    /// A few lines for people: vCPUs, exits by reason, wall time, outcome.
    pub fn summary(&self) -> String {
        let mut exit_totals = vec![0u64; ExitKind::ALL.len()];
        for v in &self.vcpus {
            for (slot, (_, n)) in exit_totals.iter_mut().zip(&v.exits) {
                *slot += n;
            }
        }
        let exits: Vec<String> = ExitKind::ALL
            .iter()
            .zip(&exit_totals)
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect();
        let mut s = format!(
            "hvprof: {} ({} boot, {} vCPU{}, {:.3} s)\n",
            self.outcome,
            self.protocol,
            self.vcpus.len(),
            if self.vcpus.len() == 1 { "" } else { "s" },
            self.wall_time.as_secs_f64()
        );
        s.push_str(&format!(
            "hvprof: exits: {}\n",
            if exits.is_empty() {
                "none".to_string()
            } else {
                exits.join(", ")
            }
        ));
        for (v, p) in self.vcpus.iter().zip(&self.profile_stats) {
            let n: u64 = v.exits.iter().map(|(_, n)| n).sum();
            s.push_str(&format!(
                "hvprof:   vCPU {}: {n} exits, {} unclaimed accesses, {}\n",
                v.index,
                v.unclaimed,
                profile_line(p)
            ));
        }
        let t = total(&self.profile_stats);
        if t.samples > 0 || t.hypercalls > 0 || !self.results.is_empty() {
            s.push_str(&format!(
                "hvprof: profiling: {}, {} guest objects and {} host profiles ran\n",
                profile_line(&t),
                self.results.len(),
                self.host_results.len()
            ));
        }
        for w in self.process_filter_warnings() {
            s.push_str(&format!("hvprof: warning: {w}\n"));
        }
        for t in &self.timelines {
            s.push_str(&format!(
                "hvprof: timeline of host profile {}: {} samples ({} dropped), {} markers ({} dropped)\n",
                t.object,
                t.samples.len(),
                t.dropped_samples,
                t.markers.len(),
                t.dropped_markers
            ));
        }
        s
    }
}

impl RunReport {
    /// Why each host profile restricted to guest processes by name counted nothing: no
    /// process was ever named (the guest kernel's layout never came), or none of those names
    /// ran while it sampled.
    pub fn process_filter_warnings(&self) -> Vec<String> {
        let named = self.processes.iter().any(|p| p.identified);
        self.host_results
            .iter()
            .filter(|h| !h.spec.process.is_empty() && h.total() == 0)
            .map(|h| {
                format!(
                    "host profile {} (--process {}) counted no sample: {}",
                    h.id,
                    h.spec.process.join(" "),
                    if named {
                        "no guest process of that name ran while it sampled"
                    } else {
                        "the guest kernel's layout was never found, so no guest process was named"
                    }
                )
            })
            .collect()
    }
}

fn profile_line(p: &StatsSnapshot) -> String {
    let mut s = format!(
        "{} samples ({} attributed, {} outside every object, {} lost to coalesced kicks), \
         {} counts, {} interrupts injected, {} hypercalls",
        p.samples,
        p.attributed,
        p.outside(),
        p.coalesced,
        p.counts,
        p.injected,
        p.hypercalls
    );
    // The in-kernel sampler's records that found the vCPU thread in the host.
    if p.host_time > 0 {
        s += &format!(", {} in-kernel samples of host time", p.host_time);
    }
    s
}

/// What a controller thread can reach in a running VM.
pub struct VmControl {
    /// Ends the run; a controller returns once it is requested.
    pub stop: Arc<StopSignal>,
    /// Profile objects and counters.
    pub profiler: Arc<Profiler>,
    /// The vCPUs, to kick or signal.
    pub vcpus: Vec<VcpuRequester>,
    /// The guest's running time; whoever pauses or resumes the vCPUs says so here.
    pub uptime: Arc<Uptime>,
}

/// A function run on its own thread while the VM runs.
pub type Controller = Box<dyn FnOnce(VmControl) + Send>;

/// Extra ways to observe and drive a run.
#[derive(Default)]
pub struct RunHooks {
    /// Watches every vCPU thread: its guest entries, its triggers' perf events (benchmarks).
    pub observer: Option<Arc<dyn VcpuObserver>>,
    /// Each runs on its own thread once the vCPUs have started; each must return once the
    /// stop signal is requested (by itself or anything else).
    pub controllers: Vec<Controller>,
    /// Host-side profiles to start with the VM.
    pub host_profiles: Vec<HostProfileSpec>,
    /// A source's interval to set before the guest runs (its unit: 100 ns for ProfileTime).
    pub interval: Option<(profile_core::ProfileSource, u32)>,
    /// Where the guest kernel's structure layout comes from, to name the processes and
    /// threads host-side samples ran in.
    pub guest_types: GuestTypes,
    /// Where a Linux guest's mapped files are found: the archives among them unwind its
    /// processes' user-mode stacks at sample time.
    pub guest_files: GuestFiles,
}

/// Builds the VM for `config`, runs it until it ends, and reports how it went.
pub fn run(config: &VmConfig) -> Result<RunReport, VmError> {
    run_with(config, RunHooks::default())
}

/// As [`run`], with hooks.
pub fn run_with(config: &VmConfig, hooks: RunHooks) -> Result<RunReport, VmError> {
    // The run's one clock: every time it records counts from here.
    let run_clock = RunClock::start();
    let started = run_clock.instant();
    // Block SIGINT/SIGTERM before any thread exists, so every thread inherits the mask.
    let signals = StopSignals::block_and_open().map_err(|e| VmError::Host("a signalfd", e))?;
    signals::install_handlers()?;
    let timeline = hooks.host_profiles.iter().any(|s| s.timeline);
    let vm = Vm::new(config, hooks.observer, run_clock, timeline)?;
    let protocol = vm.boot.protocol;
    let Vm {
        vm_fd,
        vcpus,
        serial,
        stop,
        profiler,
        firmware_slot,
        mut disks,
        ..
    } = vm;

    // Before any vCPU runs: the layout, or the thread that will look it up once a sample has
    // found the guest's kernel (it reads symbol files and servers, so it is filtered as the
    // results thread is).
    // The files a Linux guest's processes map, when a sysroot or a disk image holds them: read
    // for their unwind sections on a thread of their own, filtered as the results thread is.
    let guest_files = profiler
        .guest()
        .set_unwind_files(&hooks.guest_files)
        .map(|requests| {
            let profiler = profiler.clone();
            let seccomp = config.seccomp;
            std::thread::Builder::new()
                .name("guest-files".into())
                .spawn(move || match install(ThreadKind::Results, seccomp) {
                    Ok(()) => profiler.guest().serve_unwind_files(requests),
                    Err(e) => log::warn!("user stacks are unwound by frame pointers only: {e}"),
                })
        })
        .transpose()
        .map_err(|e| VmError::Host("the guest-files thread", e))?;
    let lookup = profiler
        .guest()
        .set_types(hooks.guest_types)
        .map(|(lookup, found)| {
            let profiler = profiler.clone();
            let seccomp = config.seccomp;
            std::thread::Builder::new()
                .name("guest-types".into())
                .spawn(move || match install(ThreadKind::Results, seccomp) {
                    Ok(()) => profiler.guest().serve_lookup(lookup, found),
                    Err(e) => log::warn!("guest processes are not named: {e}"),
                })
        })
        .transpose()
        .map_err(|e| VmError::Host("the guest-types thread", e))?;
    let mut handles = Vec::with_capacity(vcpus.len());
    let mut start_error = None;
    for vcpu in vcpus {
        match vcpu.start() {
            Ok(h) => handles.push(h),
            Err(e) => {
                start_error = Some(VmError::Host("a vCPU thread", e));
                break;
            }
        }
    }
    if let Some((source, interval)) = hooks.interval {
        profiler.set_interval(source, interval);
    }
    let drain = match profiler.sampling().mode() {
        crate::sampler::SamplerMode::Kernel => {
            match super::drain::start(profiler.clone(), config.seccomp) {
                Ok(d) => Some(d),
                Err(e) => {
                    start_error.get_or_insert(VmError::Host("the sampler's drain thread", e));
                    None
                }
            }
        }
        crate::sampler::SamplerMode::Kick => None,
    };
    // A timeline started here records from the run's start: its phases are the run's.
    if hooks.host_profiles.iter().any(|s| s.timeline) {
        profiler.timeline().phases_from_start();
    }
    for spec in hooks.host_profiles {
        if let Err(e) = profiler.start_host_profile(spec) {
            start_error.get_or_insert(VmError::HostProfile(e));
        }
    }
    let mut controllers = Vec::new();
    let uptime = Arc::new(Uptime::start_at(started));
    if start_error.is_none() {
        for f in hooks.controllers {
            let control = VmControl {
                stop: stop.clone(),
                profiler: profiler.clone(),
                vcpus: handles.iter().map(|h| h.requester()).collect(),
                uptime: uptime.clone(),
            };
            let seccomp = config.seccomp;
            let spawned = std::thread::Builder::new()
                .name("controller".into())
                .spawn(move || match install(ThreadKind::Controller, seccomp) {
                    Ok(()) => f(control),
                    Err(e) => {
                        control.stop.request(RunOutcome::HostError(e.to_string()));
                    }
                });
            match spawned {
                Ok(t) => controllers.push(t),
                Err(e) => {
                    start_error = Some(VmError::Host("a controller thread", e));
                    break;
                }
            }
        }
    }
    if start_error.is_none() {
        let params = LoopParams {
            stop: stop.clone(),
            signals,
            serial: serial.clone(),
            serial_input: config.serial_input,
            vcpus: handles.iter().map(|h| h.requester()).collect(),
            timeout: config.timeout,
            started,
            watchdog_period: config.watchdog_period,
            queue_watches: disks.iter_mut().filter_map(|d| d.watch.take()).collect(),
            seccomp: config.seccomp,
        };
        // The loop gets a thread (and a filter) of its own; this one only waits for it, then
        // winds the run down once the VM can no longer run guest code.
        let looped = std::thread::Builder::new()
            .name("event-loop".into())
            .spawn(move || run_until_stopped(params))
            .map_err(|e| e.to_string())
            .and_then(|t| t.join().map_err(|_| "the event loop panicked".to_string()))
            .and_then(|r| r.map_err(|e| e.to_string()));
        if let Err(e) = looped {
            stop.request(RunOutcome::HostError(format!("event loop failed: {e}")));
        }
    } else {
        stop.request(RunOutcome::HostError("could not start every vCPU".into()));
    }

    for t in controllers {
        if t.join().is_err() {
            log::error!("a controller thread panicked");
        }
    }
    // Ask every vCPU to stop before waiting for any, so they wind down together.
    for h in &handles {
        h.requester().request(Request::Stop);
    }
    let vcpus: Vec<VcpuSummary> = handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| VcpuSummary::from_counters(i, &h.stop_and_join()))
        .collect();
    // The vCPUs drained their own rings as they left.
    if let Some(d) = drain {
        d.stop();
    }
    for d in &disks {
        d.serve_pending();
        d.close();
        log::info!("{}", d.summary());
    }
    // Every vCPU has stopped: release every pinned buffer and keep the objects' counts.
    profiler.close_all();
    profiler.guest().close();
    if let Some(t) = lookup {
        if t.join().is_err() {
            log::error!("the guest-types thread panicked");
        }
    }
    if let Some(t) = guest_files {
        if t.join().is_err() {
            log::error!("the guest-files thread panicked");
        }
    }
    profiler.walk_guest_processes();
    let (processes, threads) = profiler.guest().table().rows();
    let profile_stats = profiler.stats();
    let results = profiler.results();
    let host_results = profiler.host_results();
    let timelines = profiler.timelines();
    let guest_modules = profiler.guest_modules();
    let interval_100ns = profiler.time_interval();
    let clock = profiler.sampling().clock();
    let sampler = profiler.sampling().mode();
    drop(profiler);
    drop(vm_fd);
    // The firmware's memory goes only once no vCPU can run and the VM is closed.
    drop(firmware_slot);
    if let Some(e) = start_error {
        return Err(e);
    }
    let outcome = stop
        .outcome()
        .unwrap_or_else(|| RunOutcome::HostError("the run ended without an outcome".into()));
    Ok(RunReport {
        outcome,
        protocol,
        start: run_clock,
        wall_time: started.elapsed(),
        vcpus,
        profile_stats,
        results,
        host_results,
        guest_modules,
        processes,
        threads,
        interval_100ns,
        clock,
        sampler,
        timelines,
    })
}
