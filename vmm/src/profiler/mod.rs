//! Profiling, in two parts sampled by the same triggers on the vCPU threads:
//!
//! - [`guest_objects`]: the guest's profile objects, which its agent creates by hypercall:
//!   the object table, the buffers pinned for started objects, NT attribution of each sample
//!   into them, the agent's intervals, the profile interrupt, the results of stopped objects;
//! - [`host_profiles`]: profiles the VMM owns, which need no agent: their counts, the call
//!   stack of each sample, each vCPU's image cache and the guest modules it found.
//!
//! Both claim [`triggers`] on the vCPUs they sample; with the in-kernel sampler, [`flat`]
//! drains the vCPUs' rings into both while the vCPUs run; [`vcpu_counters`] counts what each vCPU's
//! samples and hypercalls did; [`timeline`] records the run on a time axis while a host
//! profile started with one runs. [`Profiler`] owns one of each and hands every sample to both.

pub mod flat;
pub mod guest_objects;
pub mod host_profiles;
pub mod timeline;
mod triggers;
pub mod vcpu_counters;

use std::sync::Arc;

use kvm_ioctls::VmFd;
use profile_core::{NtStatus, ProfileSource};
use vm_memory::GuestMemoryMmap;

pub use guest_objects::{features_for, ObjectResult, ProfilerError, FEATURES, GUEST_OWNER};

use crate::arch::cpu_state::CpuState;
use crate::clock::RunClock;
use crate::sampler::probe::ProbeReport;
use crate::sampler::ring::Ring;
use crate::sampler::vcpu::{Serving, Ticks};
use crate::sampler::{SamplerMode, Sampling, TriggerId};
use crate::signals::KickTable;
use flat::Flat;
use guest_objects::GuestObjects;
use host_profiles::{
    FoundModule, HostProfileError, HostProfileResult, HostProfileSpec, HostProfileSummary,
    HostProfiles,
};
use timeline::Timelines;
use triggers::Triggers;
use vcpu_counters::{bump, StatsSnapshot, VcpuProfileStats};

/// The VM's profiler.
pub struct Profiler {
    triggers: Arc<Triggers>,
    /// Per vCPU.
    counters: Arc<[VcpuProfileStats]>,
    objects: GuestObjects,
    host: Arc<HostProfiles>,
    /// The in-kernel sampler's rings.
    flat: Arc<Flat>,
    /// The run on a time axis, recorded while a host profile with a timeline runs.
    timeline: Arc<Timelines>,
}

impl Profiler {
    /// A profiler for a VM with one vCPU per slot of `kicks`, offering ProfileTime and the
    /// PMU sources `sampling` found (`probe` is the probe that found them); its times count
    /// from the run's `clock`.
    pub fn new(
        mem: GuestMemoryMmap,
        vm_fd: Arc<VmFd>,
        kicks: Arc<KickTable>,
        sampling: Arc<Sampling>,
        probe: Arc<ProbeReport>,
        clock: RunClock,
    ) -> Result<Self, ProfilerError> {
        let triggers = Arc::new(Triggers::new(sampling, kicks));
        let timeline = Arc::new(Timelines::with_clock(triggers.vcpu_count(), clock));
        let counters: Arc<[VcpuProfileStats]> = (0..triggers.vcpu_count())
            .map(|_| VcpuProfileStats::default())
            .collect();
        let host = Arc::new(HostProfiles::new(
            mem.clone(),
            triggers.clone(),
            probe,
            timeline.clone(),
            clock.instant(),
        ));
        let flat = Arc::new(Flat::new(
            triggers.clone(),
            counters.clone(),
            host.clone(),
            timeline.clone(),
        ));
        let objects =
            GuestObjects::new(mem, vm_fd, triggers.clone(), timeline.clone(), flat.clone())?;
        Ok(Profiler {
            counters,
            objects,
            host,
            flat,
            triggers,
            timeline,
        })
    }

    /// The VM's triggers.
    pub fn sampling(&self) -> &Sampling {
        self.triggers.sampling()
    }

    /// The feature flags this VM offers (CPUID and QUERY_INFO): the PMU bit when a PMU source
    /// is present.
    pub fn features(&self) -> u32 {
        self.objects.features()
    }

    /// The ProfileTime interval in force, in 100 ns units.
    pub fn time_interval(&self) -> u32 {
        self.objects.query_interval(ProfileSource::TIME)
    }

    /// Sets `source`'s interval (its unit, clamped) as the host, as NtSetIntervalProfile would;
    /// returns the value in force (0 for a source absent here).
    pub fn set_interval(&self, source: ProfileSource, interval: u32) -> u32 {
        self.objects.set_host_interval(source, interval)
    }

    /// Number of vCPUs.
    pub fn vcpu_count(&self) -> usize {
        self.triggers.vcpu_count()
    }

    /// Changes whenever the sampling timers' settings change.
    pub fn timer_generation(&self) -> u64 {
        self.triggers.generation()
    }

    /// The interval vCPU `v` must arm trigger `t` at (in its source's unit; ProfileTime's for
    /// a software clock), or None when nothing started samples `v` on it.
    pub fn trigger_setting(&self, v: usize, t: TriggerId) -> Option<u32> {
        self.triggers.is_sampled(v, t).then(|| {
            let source = self.sampling().source(t).unwrap_or(ProfileSource::TIME);
            self.objects.query_interval(source)
        })
    }

    /// How vCPU `v` samples trigger `t`: nothing while no claim stands. Kicks at the
    /// trigger's interval serve every claim unless the run samples in the kernel, `v` has its
    /// ring with an event for `t`, no claim needs `v`'s registers at the trigger's interval
    /// and no profile interrupt is to be delivered on `v`. Then the ring serves the flat
    /// claims at that interval, and kicks at the shortest kick interval (when longer than the
    /// trigger's) serve the claims that need registers every so often; with a kick interval
    /// no longer than the trigger's, kicks serve every claim. Read when a vCPU re-arms, never
    /// per sample: each kick says whether its ring was armed beside it (`Ticks::beside_ring`).
    pub fn serving(&self, v: usize, t: TriggerId) -> Serving {
        let Some(interval) = self.trigger_setting(v, t) else {
            return Serving::default();
        };
        let kicks_all = Serving {
            ring: None,
            kicks: Some(interval),
        };
        let kernel = self.sampling().mode() == SamplerMode::Kernel
            && self.flat.serves(v, t)
            && !self.objects.has_interrupt(v);
        if !kernel || self.triggers.needs_registers(v, t) {
            return kicks_all;
        }
        match self.triggers.slow(v, t) {
            Some((every, _)) if every <= interval => kicks_all,
            slow => Serving {
                ring: self.triggers.has_flat_claims(v, t).then_some(interval),
                kicks: slow.map(|(every, _)| every),
            },
        }
    }

    /// vCPU `v`'s thread samples into `ring` from now on.
    pub fn register_ring(&self, v: usize, ring: Ring) {
        self.flat.register(v, ring);
    }

    /// Attributes the in-kernel sampler's records taken so far (the drain thread's work).
    pub fn drain(&self) {
        self.objects.drain();
    }

    /// The MSRs vCPU `v`'s next sample should read: IA32_KERNEL_GS_BASE (the guest kernel's
    /// per-CPU base, which a user-mode sample does not show in GS) and IA32_LSTAR (inside a
    /// Windows kernel not found yet), each only while it is needed.
    pub fn wanted_msrs(&self, v: usize) -> crate::arch::cpu_state::WantedMsrs {
        self.host.guest().wanted_msrs(v)
    }

    /// Counts `n` samples vCPU `v` lost (signals that named none of its triggers).
    pub fn count_lost(&self, v: usize, n: u32) {
        if let Some(c) = self.counters.get(v) {
            bump(&c.coalesced, u64::from(n));
        }
    }

    /// Called by vCPU `v` when a trigger fired `tick.ticks` times (plus `tick.folded`
    /// expirations the kernel folded into them) since the last call: takes one sample at
    /// `cpu`, counts the rest as lost. The sample counts in the guest's objects of the
    /// trigger's source and the host profiles sampling on it, nowhere else (beside an armed
    /// ring, only in the host profiles that need registers: the ring serves the rest); then
    /// the guest's profile interrupt, if it set one, is delivered.
    pub fn on_tick(&self, v: usize, cpu: &CpuState, tick: Ticks) {
        let Ticks {
            trigger: t,
            ticks,
            folded,
            beside_ring,
        } = tick;
        let Some(counters) = self.counters.get(v) else {
            return;
        };
        counters.lost(u64::from(ticks.saturating_sub(1)) + u64::from(folded));
        if ticks == 0 || !self.triggers.is_sampled(v, t) {
            return; // a tick from a trigger being disarmed
        }
        let guest = if beside_ring {
            0
        } else {
            self.objects.record(v, cpu, t)
        };
        let host = self.host.record(v, cpu, t, beside_ring);
        counters.sampled(u64::from(guest) + host);
        if self.objects.interrupt(v) {
            bump(&counters.injected, 1);
        }
    }

    /// Runs the call whose request block is at `gpa`, rung by vCPU `vcpu` in state `cpu`.
    /// Returns the status (also written into the block when the block is reachable).
    pub fn hypercall(&self, vcpu: usize, gpa: u64, cpu: &CpuState) -> NtStatus {
        if let Some(c) = self.counters.get(vcpu) {
            bump(&c.hypercalls, 1);
        }
        let timed = self.timeline.recording().then(|| self.timeline.now_ns());
        let (call, status) =
            guest_objects::hypercall::run(&self.objects, &self.counters, vcpu, gpa, cpu);
        if let Some(start) = timed {
            let name = timeline::hypercall_marker(call, status);
            let end = self.timeline.now_ns();
            self.timeline.marker(
                Some(vcpu),
                report::timeline::MarkerKind::Hypercall,
                start,
                end,
                name,
            );
        }
        status
    }

    /// The run's time axis (markers' hooks ask it whether a timeline records).
    pub fn timeline(&self) -> &Timelines {
        &self.timeline
    }

    /// The timelines of the host profiles started with one, the run ending now (call once the
    /// vCPUs have stopped).
    pub fn timelines(&self) -> Vec<report::timeline::Timeline> {
        let ids: Vec<u32> = self
            .host
            .summaries()
            .iter()
            .filter(|s| s.spec.timeline)
            .map(|s| s.id)
            .collect();
        self.timeline.finish(&ids)
    }

    /// Called by vCPU `v`'s thread as it leaves the guest for good (see
    /// [`HostProfiles::vcpu_exiting`]).
    pub fn vcpu_exiting(&self, v: usize) {
        // Its last in-kernel samples, before its ring goes with its events.
        self.objects.drain();
        self.flat.unregister(v);
        self.host.vcpu_exiting(v);
    }

    /// The PE images the vCPUs found in guest memory while sampling for host profiles, and
    /// the modules on the Windows kernel's list if a sample found the kernel, each once, in the
    /// order found.
    pub fn guest_modules(&self) -> Vec<FoundModule> {
        self.host.guest_modules()
    }

    /// The guest's processes and threads host-side samples found: the layout they are read
    /// with, the vCPUs' contexts and the run's rows.
    pub fn guest(&self) -> &host_profiles::guest_awareness::GuestAwareness {
        self.host.guest()
    }

    /// Tells `observer` how long each stack walk on the sample path takes (a measuring run).
    pub fn observe_walks(&self, observer: Arc<dyn host_profiles::WalkObserver>) {
        self.host.observe_walks(observer);
    }

    /// Walks the guest kernel's process list a last time (the run is over): processes no
    /// sample found are listed with none.
    pub fn walk_guest_processes(&self) {
        self.host.walk_guest_processes();
    }

    /// Starts a host-side profile; returns its id.
    pub fn start_host_profile(&self, spec: HostProfileSpec) -> Result<u32, HostProfileError> {
        // A malformed spec is told as such before whether its filter can ever match.
        spec.validate()?;
        if let Some(why) = self
            .host
            .guest()
            .why_no_process_names()
            .filter(|_| !spec.process.is_empty())
        {
            return Err(HostProfileError::NoProcessNames(why));
        }
        // The records taken before it are not its.
        self.objects.drain();
        self.host.start(spec)
    }

    /// Stops host profile `id`; its counts stay readable.
    pub fn stop_host_profile(&self, id: u32) -> Result<(), HostProfileError> {
        // The records taken before the stop are its.
        self.objects.drain();
        self.host.stop(id)
    }

    /// Every host profile's counts so far.
    pub fn host_results(&self) -> Vec<HostProfileResult> {
        self.host.results()
    }

    /// Host profile `id`'s counts so far (copying only that profile's), or None when there is
    /// no such profile.
    pub fn host_result(&self, id: u32) -> Option<HostProfileResult> {
        self.host.result(id)
    }

    /// Host profile `id`'s counts so far, per guest thread too, without its stacks (what the
    /// API's reads copy), or None when there is no such profile.
    pub fn host_counts(&self, id: u32) -> Option<HostProfileResult> {
        self.host.counts_now(id)
    }

    /// Every host profile's id, spec, state and sample total, without copying its counts.
    pub fn host_summaries(&self) -> Vec<HostProfileSummary> {
        self.host.summaries()
    }

    /// Stops and closes every object of the guest and every host profile (VM exit, guest
    /// reset) and keeps their results.
    pub fn close_all(&self) {
        self.objects.drain();
        self.host.stop_all();
        self.objects.close_all();
    }

    /// Results of every object that has stopped, in creation order.
    pub fn results(&self) -> Vec<ObjectResult> {
        self.objects.results()
    }

    /// Per-vCPU counters.
    pub fn stats(&self) -> Vec<StatsSnapshot> {
        self.counters.iter().map(|s| s.snapshot()).collect()
    }
}
