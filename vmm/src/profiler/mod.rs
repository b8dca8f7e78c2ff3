//! Profiling: the profile objects (profile-core's manager behind a lock), the buffers pinned
//! for started objects, sample attribution on the vCPU threads, profile-interrupt injection,
//! and the results kept by the VMM.
//!
//! Locking: `record` runs under the read side of `manager`; start, stop and close take the
//! write side. So when stop or close returns, no vCPU is still counting into that object, and
//! none will again: its pinned pages are released and never written after that point.

mod calls;
pub mod host;
pub mod pin;
pub mod stacks;
pub mod stats;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kvm_ioctls::VmFd;
use profile_core::object::ObjectConfig;
use profile_core::{
    CounterSink, ObjectId, ObjectManager, Owner, PlatformInfo, ProfileSource, Sample,
};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

pub use calls::{CpuState, FEATURES};

use crate::memory::GuestRam;
use crate::sampler::probe::ProbeReport;
use crate::sampler::{Sampling, TriggerId};
use host::{HostProfile, HostProfileError, HostProfileResult, HostProfileSpec, HostProfileSummary};
use pin::PinnedBuffer;
use stacks::StackWalker;
use stats::{bump, StatsSnapshot, VcpuProfileStats};

use crate::devices::pci::msix::{signal_msi, MsiMessage};
use crate::signals::KickTable;

/// The owner of every object the guest's agents create (one handle table per guest).
pub const GUEST_OWNER: Owner = Owner(1);

/// What the VMM keeps of an object once it stops: its configuration and the counts it
/// gathered (summed over every start/stop cycle), from the VMM's own copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectResult {
    /// The object.
    pub object: ObjectId,
    /// Its configuration.
    pub config: ObjectConfig,
    /// One count per bucket.
    pub counts: Vec<u32>,
}

impl ObjectResult {
    /// Samples counted in total.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| u64::from(*c)).sum()
    }
}

/// The feature flags a VM with `sampling`'s triggers offers.
pub fn features_for(sampling: &Sampling) -> u32 {
    if sampling.pmu_sources().is_empty() {
        FEATURES
    } else {
        FEATURES | profile_core::abi::cpuid::FEATURE_PMU_SOURCES
    }
}

/// The VM's profiler.
pub struct Profiler {
    manager: RwLock<ObjectManager<PinnedBuffer>>,
    mem: GuestMemoryMmap,
    /// What the guest's memory map calls RAM: the only place request blocks and pinned
    /// frames may be.
    ram: GuestRam,
    vm_fd: Arc<VmFd>,
    vcpus: Box<[VcpuSlot]>,
    generation: AtomicU64,
    /// Only to make vCPUs re-read their timer settings: the profiler cannot pause or stop them.
    kicks: Arc<KickTable>,
    results: Mutex<BTreeMap<ObjectId, ObjectResult>>,
    host: RwLock<Vec<HostProfile>>,
    /// What the vCPUs sample on: ProfileTime's clock and the events present here.
    sampling: Arc<Sampling>,
    /// The probe that found them, for telling users why an event is absent.
    probe: Arc<ProbeReport>,
}

/// Per-vCPU profiling state.
struct VcpuSlot {
    /// Per trigger, the started objects and running host profiles that sample this vCPU on
    /// it; the vCPU arms a trigger while its count is above zero.
    coverage: Box<[AtomicU32]>,
    /// Profile-interrupt vector, 0 = off.
    vector: AtomicU32,
    stats: VcpuProfileStats,
    /// Only this vCPU's thread walks with it; the lock is never contended.
    walker: Mutex<StackWalker>,
    /// Per trigger, the descriptor of its perf event on this vCPU's thread (-1: none).
    fds: Box<[AtomicI32]>,
}

impl VcpuSlot {
    fn new(triggers: usize) -> Self {
        VcpuSlot {
            coverage: (0..triggers).map(|_| AtomicU32::new(0)).collect(),
            vector: AtomicU32::new(0),
            stats: VcpuProfileStats::default(),
            walker: Mutex::new(StackWalker::default()),
            fds: (0..triggers).map(|_| AtomicI32::new(-1)).collect(),
        }
    }

    fn is_sampled(&self, t: TriggerId) -> bool {
        self.coverage
            .get(t)
            .is_some_and(|c| c.load(Ordering::Acquire) > 0)
    }
}

/// Adds one sample's counts into pinned buffers.
struct PinSink;

impl CounterSink<PinnedBuffer> for PinSink {
    fn increment(&mut self, pin: &PinnedBuffer, _object: ObjectId, byte_offset: u64) {
        pin.increment(byte_offset);
    }
}

/// Errors creating the profiler.
#[derive(Debug, thiserror::Error)]
pub enum ProfilerError {
    /// profile-core refused the platform description.
    #[error("profile-core refused the platform: {0}")]
    Platform(profile_core::NtStatus),
}

impl Profiler {
    /// A profiler for a VM with one vCPU per slot of `kicks`, offering ProfileTime and the
    /// PMU sources `sampling` found (`probe` is the probe that found them).
    pub fn new(
        mem: GuestMemoryMmap,
        vm_fd: Arc<VmFd>,
        kicks: Arc<KickTable>,
        sampling: Arc<Sampling>,
        probe: Arc<ProbeReport>,
    ) -> Result<Self, ProfilerError> {
        let vcpus = kicks.len();
        let count = u32::try_from(vcpus).unwrap_or(u32::MAX);
        let mut platform = PlatformInfo::timer_only(count);
        platform.sources.extend(sampling.pmu_sources());
        let manager = ObjectManager::new(platform).map_err(ProfilerError::Platform)?;
        let triggers = sampling.len();
        // Guest memory is laid out by `memory::ram_regions`, so its total size gives the map
        // the guest is told (direct boot) or the PC map its firmware reports (the same RAM:
        // SeaBIOS too keeps 0x9FC00-0xFFFFF out of the map it gives the OS).
        let size: u64 = mem.iter().map(|r| r.len()).sum();
        let ram = GuestRam::from_map(&crate::memory::memory_map(size));
        Ok(Profiler {
            manager: RwLock::new(manager),
            mem,
            ram,
            vm_fd,
            vcpus: (0..vcpus).map(|_| VcpuSlot::new(triggers)).collect(),
            generation: AtomicU64::new(0),
            kicks,
            results: Mutex::new(BTreeMap::new()),
            host: RwLock::new(Vec::new()),
            sampling,
            probe,
        })
    }

    /// The VM's triggers.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// The feature flags this VM offers (CPUID and QUERY_INFO): the PMU bit when a PMU source
    /// is present.
    pub fn features(&self) -> u32 {
        features_for(&self.sampling)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ObjectManager<PinnedBuffer>> {
        self.manager.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ObjectManager<PinnedBuffer>> {
        self.manager.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The ProfileTime interval in force, in 100 ns units.
    pub fn time_interval(&self) -> u32 {
        self.read().query_interval(ProfileSource::TIME)
    }

    /// Sets `source`'s interval (its unit, clamped) as the host, as NtSetIntervalProfile
    /// would; returns the value in force (0 for a source absent here).
    pub fn set_interval(&self, source: ProfileSource, interval: u32) -> u32 {
        let set = self
            .write()
            .set_interval(profile_core::CallerRights::KERNEL, source, interval);
        self.timers_changed();
        set.unwrap_or_else(|_| self.read().query_interval(source))
    }

    /// Number of vCPUs.
    pub fn vcpu_count(&self) -> usize {
        self.vcpus.len()
    }

    /// Changes whenever the sampling timers' settings change.
    pub fn timer_generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The interval vCPU `v` must arm trigger `t` at (in its source's unit; ProfileTime's for
    /// a software clock), or None when nothing started samples `v` on it.
    pub fn trigger_setting(&self, v: usize, t: TriggerId) -> Option<u32> {
        let sampled = self.vcpus.get(v).is_some_and(|s| s.is_sampled(t));
        sampled.then(|| {
            let source = self.sampling.source(t).unwrap_or(ProfileSource::TIME);
            self.read().query_interval(source)
        })
    }

    /// Tells every vCPU to re-read its timer setting. A vCPU reads the generation before each
    /// `KVM_RUN`; one inside `KVM_RUN` is kicked out, and one not yet in the kick table has not
    /// entered the guest yet, so none misses the change.
    fn timers_changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.kicks.kick_all();
    }

    /// Records, from vCPU `v`'s thread, the descriptor of its perf event for trigger `t`.
    pub fn note_trigger_fd(&self, v: usize, t: TriggerId, fd: Option<std::os::fd::RawFd>) {
        if let Some(slot) = self.vcpus.get(v).and_then(|s| s.fds.get(t)) {
            slot.store(fd.unwrap_or(-1), Ordering::Release);
        }
    }

    /// The descriptor of vCPU `v`'s perf event for trigger `t`, once its thread opened it.
    pub fn trigger_fd(&self, v: usize, t: TriggerId) -> Option<std::os::fd::RawFd> {
        let fd = self.vcpus.get(v)?.fds.get(t)?.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }

    /// Counts `n` samples vCPU `v` lost (signals that named none of its triggers).
    pub fn count_lost(&self, v: usize, n: u32) {
        if let Some(slot) = self.vcpus.get(v) {
            bump(&slot.stats.coalesced, u64::from(n));
        }
    }

    /// Called by vCPU `v` when trigger `t` fired `ticks` times (plus `folded` expirations
    /// the kernel folded into them) since the last call: takes one sample at `cpu`, counts
    /// the rest as lost. The sample counts in the objects of `t`'s source and the host
    /// profiles sampling on `t`, nowhere else.
    pub fn on_tick(&self, v: usize, cpu: &CpuState, t: TriggerId, ticks: u32, folded: u32) {
        let Some(slot) = self.vcpus.get(v) else {
            return;
        };
        let lost = u64::from(ticks.saturating_sub(1)) + u64::from(folded);
        if lost > 0 {
            bump(&slot.stats.coalesced, lost);
        }
        if ticks == 0 || !slot.is_sampled(t) {
            return; // a tick from a trigger being disarmed
        }
        let n = match self.sampling.source(t) {
            Some(source) => {
                let sample = Sample {
                    vcpu: u32::try_from(v).unwrap_or(u32::MAX),
                    pc: cpu.rip,
                    process: Some(profile_core::attribution::process_key(cpu.paging.cr3)),
                    source,
                };
                self.read().record(&sample, &mut PinSink)
            }
            None => 0,
        };
        let mut host = 0u64;
        let all = self.host.read().unwrap_or_else(|e| e.into_inner());
        // The host profiles sampling on this trigger (no allocation on the sample path).
        let profiles = || all.iter().filter(|p| p.trigger == t);
        let (cr3, cpl) = (cpu.paging.cr3, cpu.cpl);
        // One walk serves every host profile this sample counts in, at the deepest depth any
        // of them keeps. Without stacks, the image holding the PC is still looked for, so that
        // the guest's modules are known.
        let depth = profiles()
            .map(|p| p.stack_depth(v, cpu.rip, cr3, cpl))
            .max()
            .unwrap_or(0);
        let counted = depth > 0 || profiles().any(|p| p.takes(v, cpu.rip, cr3, cpl));
        let stack = if counted {
            let mut walker = slot.walker.lock().unwrap_or_else(|e| e.into_inner());
            if depth > 0 {
                Some(walker.walk(&self.mem, cpu, depth))
            } else {
                walker.note_pc(&self.mem, cpu);
                None
            }
        } else {
            None
        };
        for p in profiles() {
            host += u64::from(p.record(v, cpu.rip, cr3, cpl, stack.as_ref()));
        }
        drop(all);
        bump(&slot.stats.samples, 1);
        if n > 0 || host > 0 {
            bump(&slot.stats.attributed, 1);
            bump(&slot.stats.counts, u64::from(n) + host);
        }
        let vector = slot.vector.load(Ordering::Relaxed);
        if vector != 0 {
            self.inject(v, vector);
        }
    }

    /// Delivers `vector` to vCPU `v`'s local APIC as a fixed, edge-triggered MSI.
    fn inject(&self, v: usize, vector: u32) {
        let apic_id = u32::try_from(v).unwrap_or(0);
        let msg = MsiMessage {
            address: 0xfee0_0000 | (u64::from(apic_id) << 12),
            data: vector & 0xff,
        };
        match signal_msi(&self.vm_fd, msg) {
            Ok(true) => bump(&self.vcpus[v].stats.injected, 1),
            // The guest's APIC would not take it (software-disabled): not injected.
            Ok(false) => log::debug!("profile interrupt {vector:#x} on vCPU {v} blocked"),
            Err(e) => log::warn!("cannot inject profile interrupt {vector:#x} on vCPU {v}: {e}"),
        }
    }

    /// Adds (`started` true) or removes a started object's claim on its source's trigger on
    /// the vCPUs in its affinity. Called under the manager's write lock.
    fn cover(&self, config: &ObjectConfig, started: bool) {
        // An object of a source absent here cannot be created, so its trigger exists.
        if let Some(t) = self.sampling.for_source(config.source) {
            self.claim_timers(
                t,
                |v| {
                    config
                        .affinity
                        .contains(u32::try_from(v).unwrap_or(u32::MAX))
                },
                started,
            );
        }
    }

    /// Adds or removes one claim on trigger `t` of the vCPUs `covers` selects, and has the
    /// vCPUs whose need changed re-arm it.
    fn claim_timers(&self, t: TriggerId, covers: impl Fn(usize) -> bool, add: bool) {
        let mut changed = false;
        for (_, slot) in self.vcpus.iter().enumerate().filter(|(v, _)| covers(*v)) {
            let Some(count) = slot.coverage.get(t) else {
                continue;
            };
            // The trigger's need changes exactly when the count leaves or reaches zero; one
            // atomic read-modify-write decides it, whichever lock the caller holds.
            changed |= if add {
                count.fetch_add(1, Ordering::AcqRel) == 0
            } else {
                count.fetch_sub(1, Ordering::AcqRel) == 1
            };
        }
        if changed {
            self.timers_changed();
        }
    }

    /// Called by vCPU `v`'s thread as it leaves the guest for good: if its samples found a
    /// Windows kernel, its module list is walked once more (drivers loaded since). The walk
    /// reads guest memory, so it happens here, under the vCPU thread's filter, not on the
    /// thread that collects the results.
    pub fn vcpu_exiting(&self, v: usize) {
        if let Some(slot) = self.vcpus.get(v) {
            let mut walker = slot.walker.lock().unwrap_or_else(|e| e.into_inner());
            walker.refresh_kernel_modules(&self.mem);
        }
    }

    /// The PE images the vCPUs found in guest memory while sampling for host profiles, and
    /// the modules on the Windows kernel's list if a sample found the kernel, each once, in the
    /// order found.
    pub fn guest_modules(&self) -> Vec<stacks::FoundModule> {
        let mut all: Vec<stacks::FoundModule> = Vec::new();
        for slot in self.vcpus.iter() {
            let walker = slot.walker.lock().unwrap_or_else(|e| e.into_inner());
            for m in walker.modules() {
                if !all.iter().any(|a| a.process == m.process && a.is(&m.image)) {
                    all.push(m.clone());
                }
            }
        }
        all
    }

    /// Starts a host-side profile; returns its id.
    pub fn start_host_profile(&self, spec: HostProfileSpec) -> Result<u32, HostProfileError> {
        spec.validate()?;
        let trigger = self
            .sampling
            .for_event(spec.event.as_deref(), &self.probe)
            .map_err(HostProfileError::Event)?;
        let mut host = self.host.write().unwrap_or_else(|e| e.into_inner());
        let id = u32::try_from(host.len() + 1).unwrap_or(u32::MAX);
        let profile = HostProfile::new(id, spec, self.vcpus.len(), trigger);
        self.claim_timers(trigger, |v| profile.samples_vcpu(v), true);
        host.push(profile);
        Ok(id)
    }

    /// Stops host profile `id`; its counts stay readable.
    pub fn stop_host_profile(&self, id: u32) -> Result<(), HostProfileError> {
        let mut host = self.host.write().unwrap_or_else(|e| e.into_inner());
        let p = host
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or(HostProfileError::Unknown(id))?;
        if !p.running {
            return Err(HostProfileError::Stopped(id));
        }
        self.claim_timers(p.trigger, |v| p.samples_vcpu(v), false);
        p.running = false;
        Ok(())
    }

    /// Every host profile's counts so far.
    pub fn host_results(&self) -> Vec<HostProfileResult> {
        let host = self.host.read().unwrap_or_else(|e| e.into_inner());
        host.iter().map(HostProfile::result).collect()
    }

    /// Host profile `id`'s counts so far (copying only that profile's), or None when there is
    /// no such profile.
    pub fn host_result(&self, id: u32) -> Option<HostProfileResult> {
        let host = self.host.read().unwrap_or_else(|e| e.into_inner());
        host.iter().find(|p| p.id == id).map(HostProfile::result)
    }

    /// Every host profile's id, spec, state and sample total, without copying its counts.
    pub fn host_summaries(&self) -> Vec<HostProfileSummary> {
        let host = self.host.read().unwrap_or_else(|e| e.into_inner());
        host.iter()
            .map(|p| HostProfileSummary {
                id: p.id,
                spec: p.spec.clone(),
                running: p.running,
                total: p.total(),
            })
            .collect()
    }

    /// Stops every running host profile (VM exit).
    fn stop_host_profiles(&self) {
        let ids: Vec<u32> = {
            let host = self.host.read().unwrap_or_else(|e| e.into_inner());
            host.iter().filter(|p| p.running).map(|p| p.id).collect()
        };
        for id in ids {
            let _ = self.stop_host_profile(id);
        }
    }

    /// Keeps the counts of a stopped or closed object.
    fn keep_result(&self, object: ObjectId, config: ObjectConfig, pin: &PinnedBuffer) {
        let counts = pin.counts();
        let mut results = self.results.lock().unwrap_or_else(|e| e.into_inner());
        let entry = results.entry(object).or_insert_with(|| ObjectResult {
            object,
            config,
            counts: vec![0; counts.len()],
        });
        for (acc, c) in entry.counts.iter_mut().zip(counts) {
            *acc = acc.wrapping_add(c);
        }
    }

    /// Stops and closes every object of the guest and every host profile (VM exit, guest
    /// reset) and keeps their results.
    pub fn close_all(&self) {
        self.stop_host_profiles();
        let mut manager = self.write();
        let handles: Vec<_> = manager
            .objects()
            .filter(|(_, o)| o.owner() == GUEST_OWNER)
            .map(|(h, o)| (h, o.id(), o.config().clone()))
            .collect();
        for (handle, object, config) in handles {
            if let Ok(Some(pin)) = manager.close(GUEST_OWNER, handle) {
                self.keep_result(object, config.clone(), &pin);
                self.cover(&config, false);
            }
        }
    }

    /// Results of every object that has stopped, in creation order.
    pub fn results(&self) -> Vec<ObjectResult> {
        self.results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Per-vCPU counters.
    pub fn stats(&self) -> Vec<StatsSnapshot> {
        self.vcpus.iter().map(|s| s.stats.snapshot()).collect()
    }
}
