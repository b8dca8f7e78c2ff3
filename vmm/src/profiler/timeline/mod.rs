//! The run on a time axis (issue 32): while at least one host profile started with a timeline
//! runs, every sample such a profile counts is recorded with its time, vCPU, privilege level,
//! guest thread and call stack, and the vCPUs and the profiler record markers for what a
//! sampler cannot see (halts, hypercalls, guest objects started and stopped, pauses, slow
//! port and MMIO exits, the run and its phases: firmware, kernel, user). At the end of the run [`Timelines::finish`] hands one
//! [`report::timeline::Timeline`] per such profile to the report side.
//!
//! Each vCPU records into a buffer of its own ([`vcpu::VcpuLog`], behind a lock only its thread
//! takes while the run lasts), its call stacks interned there; the buffers are merged, the
//! stacks renumbered and the samples sorted once the vCPUs have stopped. Memory is bounded:
//! at most [`MAX_SAMPLES`] samples and [`MAX_MARKERS`] markers per run (past them, each is
//! counted as dropped), and [`MAX_STACK_FRAMES`] frames of distinct stacks per vCPU (past
//! them, a new stack is kept as its sampled PC alone). When no timeline records, the vCPUs pay
//! one relaxed atomic load per exit ([`Timelines::recording`]).

mod names;
mod phases;
mod vcpu;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::clock::RunClock;

use report::timeline::{Marker, MarkerKind, Timeline, TimelineSample, RUN_PHASE};

pub use names::{call_name, hypercall_marker, ExitSite};
use phases::Phases;
use vcpu::VcpuLog;

/// Samples recorded per run, all vCPUs and timelines together (24 bytes each: 48 MB at most).
pub const MAX_SAMPLES: u64 = 2_000_000;
/// Markers recorded per run.
pub const MAX_MARKERS: u64 = 100_000;
/// Frames of distinct call stacks one vCPU keeps (8 MiB of PCs); past them a new stack is
/// recorded as its sampled PC alone.
pub const MAX_STACK_FRAMES: usize = 1 << 20;
/// A port or MMIO exit whose handling in hvprof takes longer than this (nanoseconds, from
/// `KVM_RUN`'s return to the exit handled) becomes a marker.
pub const SLOW_EXIT_NS: u64 = 100_000;

/// What the run records on its time axis.
pub struct Timelines {
    /// Host profiles with a timeline now running: recording while above 0.
    recording: AtomicU32,
    /// The run's start on the host's monotonic clock.
    start: Instant,
    /// The same instant on the wall clock, ns since the Unix epoch.
    start_unix_ns: u64,
    /// Per vCPU: only that vCPU's thread locks it until the run ends.
    vcpus: Box<[Mutex<VcpuLog>]>,
    /// Markers of the whole VM, and the guest objects started and not yet stopped.
    vm: Mutex<VmLog>,
    /// Samples kept so far (run-wide, for the cap).
    samples: AtomicU64,
    /// Markers kept so far.
    markers: AtomicU64,
    /// Markers not kept past the cap.
    dropped_markers: AtomicU64,
    /// Firmware, kernel, user: where the samples show the run is.
    phases: Phases,
}

#[derive(Default)]
struct VmLog {
    markers: Vec<Marker>,
    /// Guest object id -> when it started (ns from the run's start).
    objects: BTreeMap<u64, u64>,
}

impl Timelines {
    /// Nothing recorded yet, for `vcpus` vCPUs; the run starts now.
    pub fn new(vcpus: usize) -> Self {
        Self::with_clock(vcpus, RunClock::start())
    }

    /// Nothing recorded yet, for `vcpus` vCPUs; times count from the run's `clock`.
    pub fn with_clock(vcpus: usize, clock: RunClock) -> Self {
        Timelines {
            recording: AtomicU32::new(0),
            start: clock.instant(),
            start_unix_ns: clock.unix_ns(),
            vcpus: (0..vcpus).map(|_| Mutex::new(VcpuLog::default())).collect(),
            vm: Mutex::new(VmLog::default()),
            samples: AtomicU64::new(0),
            markers: AtomicU64::new(0),
            dropped_markers: AtomicU64::new(0),
            phases: Phases::new(),
        }
    }

    /// The run boots firmware (its first phase is `firmware`, not `kernel`).
    pub fn boot_firmware(&self) {
        self.phases.boot_firmware();
    }

    /// A timeline records from the run's start: its phases are the run's (see [`phases`]).
    pub fn phases_from_start(&self) {
        self.phases.recorded_from_start();
    }

    /// A sample a timeline records, at `t_ns`, at privilege level `cpl`, PC `pc`, in the
    /// address space `paging`: moves the run's phase on when it shows the kernel or user mode
    /// first (see [`phases`]).
    #[inline]
    pub fn observe(&self, t_ns: u64, cpl: u8, pc: u64, paging: &introspect::paging::Paging) {
        self.phases.observe(t_ns, cpl, pc, paging);
    }

    /// True while at least one timeline records: one relaxed load, the whole cost of a
    /// marker's hook when none does.
    #[inline]
    pub fn recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed) != 0
    }

    /// A host profile with a timeline started.
    pub fn profile_started(&self) {
        self.recording.fetch_add(1, Ordering::Relaxed);
    }

    /// A host profile with a timeline stopped.
    pub fn profile_stopped(&self) {
        let _ = self
            .recording
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Nanoseconds from the run's start, now (the monotonic clock, through the vDSO: no
    /// system call a vCPU's filter would refuse).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn vcpu(&self, v: usize) -> Option<MutexGuard<'_, VcpuLog>> {
        self.vcpus
            .get(v)
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn vm(&self) -> MutexGuard<'_, VmLog> {
        self.vm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a sample host profile `profile` counted: vCPU `v` at `t_ns`, privilege level
    /// `cpl`, guest thread row `thread`, call stack `pcs` (innermost first; the PC alone when
    /// no stack was walked). Past [`MAX_SAMPLES`] it is counted as dropped.
    pub fn sample(
        &self,
        v: usize,
        profile: u32,
        t_ns: u64,
        cpl: u8,
        thread: Option<u32>,
        pcs: &[u64],
    ) {
        let Some(mut log) = self.vcpu(v) else {
            return;
        };
        if self.samples.fetch_add(1, Ordering::Relaxed) >= MAX_SAMPLES {
            self.samples.fetch_sub(1, Ordering::Relaxed);
            log.drop_sample(profile);
            return;
        }
        log.sample(profile, t_ns, cpl, thread, pcs);
    }

    /// Reserves room for one marker; false (and counted) past [`MAX_MARKERS`].
    fn reserve_marker(&self) -> bool {
        if self.markers.fetch_add(1, Ordering::Relaxed) >= MAX_MARKERS {
            self.markers.fetch_sub(1, Ordering::Relaxed);
            self.dropped_markers.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Records a marker on vCPU `vcpu` (None: the whole VM) from `start_ns` to `end_ns`.
    /// Only while a timeline records.
    pub fn marker(
        &self,
        vcpu: Option<usize>,
        kind: MarkerKind,
        start_ns: u64,
        end_ns: u64,
        name: String,
    ) {
        if self.recording() {
            self.push_marker(vcpu, kind, start_ns, end_ns, name);
        }
    }

    /// Records a marker whether or not a timeline records now (one begun while one did).
    fn push_marker(
        &self,
        vcpu: Option<usize>,
        kind: MarkerKind,
        start_ns: u64,
        end_ns: u64,
        name: String,
    ) {
        if !self.reserve_marker() {
            return;
        }
        let marker = Marker {
            kind,
            vcpu: vcpu.map(|v| u32::try_from(v).unwrap_or(u32::MAX)),
            start_ns,
            end_ns: end_ns.max(start_ns),
            name,
        };
        match vcpu.and_then(|v| self.vcpu(v)) {
            Some(mut log) => log.markers.push(marker),
            None => self.vm().markers.push(marker),
        }
    }

    /// Guest object `object` started (its marker is recorded once it stops, or at the end).
    pub fn object_started(&self, object: u64) {
        if self.recording() {
            let now = self.now_ns();
            self.vm().objects.insert(object, now);
        }
    }

    /// Guest object `object` stopped or was closed: if it started while a timeline recorded,
    /// its marker spans from its start to now.
    pub fn object_stopped(&self, object: u64) {
        let started = self.vm().objects.remove(&object);
        if let Some(start) = started {
            let now = self.now_ns();
            self.push_marker(
                None,
                MarkerKind::Object,
                start,
                now,
                format!("object {object}"),
            );
        }
    }

    /// The timelines of the host profiles `profiles` names, the run ending now: for each, its
    /// samples sorted by time, the stacks they use, and every marker (the whole run as a
    /// `run` phase among them, and the `firmware`, `kernel` and `user` phases seen).
    pub fn finish(&self, profiles: &[u32]) -> Vec<Timeline> {
        if profiles.is_empty() {
            return Vec::new();
        }
        let end = self.now_ns();
        // Objects still started when the run ended.
        let open: Vec<u64> = self.vm().objects.keys().copied().collect();
        for object in open {
            self.object_stopped(object);
        }
        let logs: Vec<MutexGuard<'_, VcpuLog>> =
            (0..self.vcpus.len()).filter_map(|v| self.vcpu(v)).collect();
        let mut markers: Vec<Marker> = self.vm().markers.clone();
        markers.extend(logs.iter().flat_map(|l| l.markers.iter().cloned()));
        // The run and its phases: a few markers, not held to the cap (windows and bins use
        // them).
        let phase = |start_ns, end_ns, name: &str| Marker {
            kind: MarkerKind::Phase,
            vcpu: None,
            start_ns,
            end_ns,
            name: name.into(),
        };
        markers.push(phase(0, end, RUN_PHASE));
        markers.extend(
            self.phases
                .spans(end)
                .into_iter()
                .map(|(name, start, until)| phase(start, until, name)),
        );
        markers.sort_by_key(|a| (a.start_ns, a.end_ns, a.vcpu));
        let dropped_markers = self.dropped_markers.load(Ordering::Relaxed);
        profiles
            .iter()
            .map(|&id| {
                let mut t = merge(&logs, id);
                t.object = u64::from(id);
                t.start_unix_ns = self.start_unix_ns;
                t.markers = markers.clone();
                t.dropped_markers = dropped_markers;
                t
            })
            .collect()
    }
}

/// Profile `id`'s samples of every vCPU's log, sorted by time (then vCPU), with the stacks they
/// use renumbered into one table.
fn merge(logs: &[MutexGuard<'_, VcpuLog>], id: u32) -> Timeline {
    let mut stacks: Vec<Vec<u64>> = Vec::new();
    let mut index: HashMap<&[u64], u32> = HashMap::new();
    let mut samples = Vec::new();
    let mut dropped = 0;
    for (v, log) in logs.iter().enumerate() {
        dropped += log.dropped(id);
        let vcpu = u32::try_from(v).unwrap_or(u32::MAX);
        for s in log.samples.iter().filter(|s| s.profile == id) {
            let pcs = log.stack(s.stack);
            let stack = *index.entry(pcs).or_insert_with(|| {
                stacks.push(pcs.to_vec());
                u32::try_from(stacks.len() - 1).unwrap_or(u32::MAX)
            });
            samples.push(TimelineSample {
                t_ns: s.t_ns,
                vcpu,
                cpl: s.cpl,
                thread: s.thread(),
                stack,
            });
        }
    }
    // Each vCPU's samples are in time order already; a stable sort keeps them so.
    samples.sort_by_key(|s| (s.t_ns, s.vcpu));
    Timeline {
        samples,
        stacks,
        dropped_samples: dropped,
        ..Timeline::default()
    }
}

#[cfg(test)]
mod tests;
