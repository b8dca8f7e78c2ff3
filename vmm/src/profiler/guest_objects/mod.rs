//! The guest's profile objects: what its agents create by hypercall ([`hypercall`]), held in
//! profile-core's object manager behind a lock; the buffers pinned for started objects
//! ([`pin`]); attributing each sample to the started objects (NT semantics, counted straight
//! into the pinned pages); the agent's intervals; injection of the profile interrupt; and the
//! counts the VMM keeps of every object that stopped.
//!
//! Locking: `record` runs under the read side of `manager`; start, stop and close take the
//! write side. So when stop or close returns, no vCPU is still counting into that object, and
//! none will again: its pinned pages are released and never written after that point. Each
//! change of the started objects first drains the in-kernel sampler's rings under the write
//! lock (`super::flat`), so the records taken before it count against the objects started
//! before it.

pub mod hypercall;
pub mod pin;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use introspect::paging::{writable_frames, Paging};
use kvm_ioctls::VmFd;
use profile_core::abi::{self, CreateReply, InfoReply, StartBuffer, StartReply};
use profile_core::affinity::{GroupAffinity, KAffinity};
use profile_core::object::ObjectConfig;
use profile_core::{
    CallerRights, CounterSink, CreateParams, Handle, NtStatus, ObjectId, ObjectManager, Owner,
    PlatformInfo, ProfileSource, Sample,
};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use super::flat::Flat;
use super::timeline::Timelines;
use super::triggers::{Need, Triggers};
use crate::arch::cpu_state::CpuState;
use crate::memory::{GuestPhys, GuestRam};
use crate::sampler::{Sampling, TriggerId};
use devices::pci::msix::{signal_msi, MsiMessage};
use pin::PinnedBuffer;

/// The owner of every object the guest's agents create (one handle table per guest).
pub const GUEST_OWNER: Owner = Owner(1);

/// Feature flags hvprof offers (CPUID 0x40000101 ECX, QUERY_INFO).
pub const FEATURES: u32 = abi::cpuid::FEATURE_START_GUEST_VIRTUAL
    | abi::cpuid::FEATURE_INTERRUPT_INJECTION
    | abi::cpuid::FEATURE_STATISTICS;

/// The feature flags a VM with `sampling`'s triggers offers.
pub fn features_for(sampling: &Sampling) -> u32 {
    if sampling.pmu_sources().is_empty() {
        FEATURES
    } else {
        FEATURES | abi::cpuid::FEATURE_PMU_SOURCES
    }
}

/// A call's outcome: the status and, on success, the reply body.
pub type CallResult<T> = Result<T, NtStatus>;

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

/// Adds one sample's counts into pinned buffers.
struct PinSink;

impl CounterSink<PinnedBuffer> for PinSink {
    fn increment(&mut self, pin: &PinnedBuffer, _object: ObjectId, byte_offset: u64) {
        pin.increment(byte_offset);
    }
}

/// Errors creating the guest's object table.
#[derive(Debug, thiserror::Error)]
pub enum ProfilerError {
    /// profile-core refused the platform description.
    #[error("profile-core refused the platform: {0}")]
    Platform(profile_core::NtStatus),
}

/// The guest's profile objects.
pub struct GuestObjects {
    manager: RwLock<ObjectManager<PinnedBuffer>>,
    mem: GuestMemoryMmap,
    /// What the guest's memory map calls RAM: the only place request blocks and pinned
    /// frames may be.
    ram: GuestRam,
    vm_fd: Arc<VmFd>,
    /// Started objects claim their source's trigger on the vCPUs in their affinity.
    triggers: Arc<Triggers>,
    /// Per vCPU, the profile-interrupt vector, 0 = off.
    vectors: Box<[AtomicU32]>,
    results: Mutex<BTreeMap<ObjectId, ObjectResult>>,
    /// Objects started and stopped are markers on the run's time axis.
    timeline: Arc<Timelines>,
    /// The in-kernel sampler's rings, drained at every change of the started objects.
    flat: Arc<Flat>,
}

/// Counts an in-kernel sample of vCPU `v` at `pc` on trigger `t` in the started objects of
/// `t`'s source that have no process restriction (the record names no process), with the
/// object table `manager`; returns the counter increments.
fn record_flat(
    manager: &ObjectManager<PinnedBuffer>,
    sampling: &Sampling,
    v: usize,
    pc: u64,
    t: TriggerId,
) -> u32 {
    let Some(source) = sampling.source(t) else {
        return 0;
    };
    let sample = Sample {
        vcpu: u32::try_from(v).unwrap_or(u32::MAX),
        pc,
        process: None,
        source,
    };
    manager.record(&sample, &mut PinSink)
}

impl GuestObjects {
    /// The objects of a VM with one vCPU per vCPU of `triggers`, offering ProfileTime and the
    /// PMU sources its sampling found.
    pub fn new(
        mem: GuestMemoryMmap,
        vm_fd: Arc<VmFd>,
        triggers: Arc<Triggers>,
        timeline: Arc<Timelines>,
        flat: Arc<Flat>,
    ) -> Result<Self, ProfilerError> {
        let vcpus = triggers.vcpu_count();
        let count = u32::try_from(vcpus).unwrap_or(u32::MAX);
        let mut platform = PlatformInfo::timer_only(count);
        platform.sources.extend(triggers.sampling().pmu_sources());
        let manager = ObjectManager::new(platform).map_err(ProfilerError::Platform)?;
        // Guest memory is laid out by `memory::ram_regions`, so its total size gives the map
        // the guest is told (direct boot) or the PC map its firmware reports (the same RAM:
        // SeaBIOS too keeps 0x9FC00-0xFFFFF out of the map it gives the OS).
        let size: u64 = mem.iter().map(|r| r.len()).sum();
        let ram = GuestRam::from_map(&crate::memory::memory_map(size));
        Ok(GuestObjects {
            manager: RwLock::new(manager),
            mem,
            ram,
            vm_fd,
            triggers,
            vectors: (0..vcpus).map(|_| AtomicU32::new(0)).collect(),
            results: Mutex::new(BTreeMap::new()),
            timeline,
            flat,
        })
    }

    /// Attributes the in-kernel sampler's records taken so far.
    pub fn drain(&self) {
        self.drain_with(&self.read());
    }

    fn drain_with(&self, manager: &ObjectManager<PinnedBuffer>) {
        let sampling = self.triggers.sampling();
        self.flat
            .drain(|v, pc, t| record_flat(manager, sampling, v, pc, t));
    }

    /// The write side, once the records taken before this moment are attributed.
    fn change(&self) -> std::sync::RwLockWriteGuard<'_, ObjectManager<PinnedBuffer>> {
        let manager = self.write();
        self.drain_with(&manager);
        manager
    }

    /// True if the agent set a profile interrupt on vCPU `v`, which is delivered after each
    /// sample as it is taken: only a kick can do that.
    pub fn has_interrupt(&self, v: usize) -> bool {
        self.vectors
            .get(v)
            .is_some_and(|a| a.load(Ordering::Relaxed) != 0)
    }

    /// The feature flags this VM offers (CPUID and QUERY_INFO): the PMU bit when a PMU source
    /// is present.
    pub fn features(&self) -> u32 {
        features_for(self.triggers.sampling())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ObjectManager<PinnedBuffer>> {
        self.manager.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ObjectManager<PinnedBuffer>> {
        self.manager.write().unwrap_or_else(|e| e.into_inner())
    }

    /// `source`'s interval in force (its unit; 0 for a source absent here).
    pub fn query_interval(&self, source: ProfileSource) -> u32 {
        self.read().query_interval(source)
    }

    /// Sets `source`'s interval (its unit, clamped) as the host, as NtSetIntervalProfile
    /// would; returns the value in force (0 for a source absent here).
    pub fn set_host_interval(&self, source: ProfileSource, interval: u32) -> u32 {
        let set = self
            .change()
            .set_interval(CallerRights::KERNEL, source, interval);
        self.triggers.changed();
        set.unwrap_or_else(|_| self.query_interval(source))
    }

    /// Sets `source`'s interval for the agent's `caller`, as NtSetIntervalProfile would: armed
    /// triggers take the new interval (an absent source has none). Returns the value in force.
    pub fn set_interval(
        &self,
        caller: CallerRights,
        source: ProfileSource,
        interval: u32,
    ) -> CallResult<u32> {
        let result = self.change().set_interval(caller, source, interval);
        if result.is_ok() && self.triggers.sampling().for_source(source).is_some() {
            self.triggers.changed();
        }
        result
    }

    /// What QUERY_INFO answers.
    pub fn info(&self) -> InfoReply {
        InfoReply::for_manager(&*self.read(), self.features())
    }

    /// Objects open and objects started.
    pub fn open_and_started(&self) -> (usize, u64) {
        let manager = self.read();
        (manager.open_count(), manager.started_count())
    }

    /// Creates an object for the guest with one group's `affinity` (CREATE).
    pub fn create(
        &self,
        params: &CreateParams,
        group: u16,
        affinity: KAffinity,
    ) -> CallResult<CreateReply> {
        let handle = self.write().create(params, group, affinity)?;
        self.created(handle)
    }

    /// Creates an object for the guest with an affinity in several groups (CREATE_EX).
    pub fn create_ex(
        &self,
        params: &CreateParams,
        groups: &[GroupAffinity],
    ) -> CallResult<CreateReply> {
        let handle = self.write().create_ex(params, groups)?;
        self.created(handle)
    }

    fn created(&self, handle: Handle) -> CallResult<CreateReply> {
        let object_id = self.read().object(GUEST_OWNER, handle).map(|o| o.id().0)?;
        Ok(CreateReply {
            handle: handle.0,
            reserved: 0,
            object_id,
        })
    }

    /// Counts a sample vCPU `v` took at `cpu` on trigger `t` in the started objects of `t`'s
    /// source (and nowhere else); returns the counter increments.
    pub fn record(&self, v: usize, cpu: &CpuState, t: TriggerId) -> u32 {
        let Some(source) = self.triggers.sampling().source(t) else {
            return 0;
        };
        let sample = Sample {
            vcpu: u32::try_from(v).unwrap_or(u32::MAX),
            pc: cpu.rip,
            process: Some(profile_core::attribution::process_key(cpu.paging.cr3)),
            source,
        };
        self.read().record(&sample, &mut PinSink)
    }

    /// Delivers the profile interrupt the agent set for vCPU `v`, if any; true if it was
    /// injected.
    pub fn interrupt(&self, v: usize) -> bool {
        let vector = self.vectors.get(v).map_or(0, |a| a.load(Ordering::Relaxed));
        vector != 0 && self.inject(v, vector)
    }

    /// Delivers `vector` to vCPU `v`'s local APIC as a fixed, edge-triggered MSI.
    fn inject(&self, v: usize, vector: u32) -> bool {
        let apic_id = u32::try_from(v).unwrap_or(0);
        let msg = MsiMessage {
            address: 0xfee0_0000 | (u64::from(apic_id) << 12),
            data: vector & 0xff,
        };
        match signal_msi(&self.vm_fd, msg) {
            Ok(true) => return true,
            // The guest's APIC would not take it (software-disabled): not injected.
            Ok(false) => log::debug!("profile interrupt {vector:#x} on vCPU {v} blocked"),
            Err(e) => log::warn!("cannot inject profile interrupt {vector:#x} on vCPU {v}: {e}"),
        }
        false
    }

    /// Sets the profile-interrupt vector of vCPU `vcpu` (every vCPU for `u32::MAX`).
    pub fn set_interrupt(&self, vcpu: u32, vector: u32) -> CallResult<()> {
        let slots: Vec<_> = if vcpu == u32::MAX {
            self.vectors.iter().collect()
        } else {
            let v = usize::try_from(vcpu).map_err(|_| NtStatus::INVALID_PARAMETER)?;
            vec![self.vectors.get(v).ok_or(NtStatus::INVALID_PARAMETER)?]
        };
        for slot in slots {
            slot.store(vector, Ordering::Relaxed);
        }
        // A vCPU with an interrupt to deliver is sampled by kicks (`has_interrupt`).
        self.triggers.changed();
        Ok(())
    }

    /// Adds (`started` true) or removes a started object's claim on its source's trigger on
    /// the vCPUs in its affinity. Called under the manager's write lock.
    fn cover(&self, config: &ObjectConfig, started: bool) {
        // An object of a source absent here cannot be created, so its trigger exists.
        if let Some(t) = self.triggers.sampling().for_source(config.source) {
            let covers = |v: usize| {
                config
                    .affinity
                    .contains(u32::try_from(v).unwrap_or(u32::MAX))
            };
            // A process restriction needs the sample's CR3: kicks.
            let need = if config.process.is_some() {
                Need::Registers
            } else {
                Need::Flat
            };
            self.triggers.claim(t, covers, started, need);
        }
    }

    /// Windows' ProbeForWrite: every page of the buffer mapped writable in the caller's space.
    pub fn buffer_writable(&self, cpu: &CpuState, buffer: u64, size: u32) -> bool {
        size == 0
            || writable_frames(&GuestPhys(&self.mem), &cpu.paging, buffer, u64::from(size)).is_ok()
    }

    /// Starts the object `handle` names, pinning the buffer `buffer` describes (`cpu`: the
    /// caller's state, whose paging mode a guest-virtual buffer is walked in).
    pub fn start(
        &self,
        handle: Handle,
        buffer: &StartBuffer<'_>,
        cpu: &CpuState,
    ) -> CallResult<StartReply> {
        let mut manager = self.change();
        let mut pages = 0usize;
        manager.start(GUEST_OWNER, handle, |req| {
            let offset = u32::try_from(req.buffer & 0xfff).unwrap_or(0);
            let pin = match buffer {
                StartBuffer::PageList(list) => {
                    list.check_covers(req.buffer, req.buffer_size)?;
                    self.check_ram(list.frames())?;
                    PinnedBuffer::pin(
                        &self.mem,
                        list.frames(),
                        offset,
                        req.buffer_size,
                        req.counters_len,
                    )
                }
                StartBuffer::GuestVirtual { va, cr3 } => {
                    if *va != req.buffer {
                        return Err(NtStatus::INVALID_PARAMETER);
                    }
                    let paging = Paging {
                        cr3: *cr3,
                        ..cpu.paging
                    };
                    let phys = GuestPhys(&self.mem);
                    let frames = writable_frames(&phys, &paging, *va, u64::from(req.buffer_size))
                        .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
                    self.check_ram(frames.iter().copied())?;
                    PinnedBuffer::pin(&self.mem, frames, offset, req.buffer_size, req.counters_len)
                }
            };
            let pin = pin.map_err(|e| {
                log::info!("START of handle {}: cannot pin the buffer: {e}", handle.0);
                NtStatus::INSUFFICIENT_RESOURCES
            })?;
            pages = pin.page_count();
            Ok(pin)
        })?;
        let (object, config) = identity(&manager, handle)?;
        self.cover(&config, true);
        self.timeline.object_started(object.0);
        Ok(StartReply {
            pinned_pages: u32::try_from(pages).unwrap_or(u32::MAX),
            reserved: 0,
        })
    }

    /// Every frame must be RAM by the guest's memory map (not merely backed by a slot).
    fn check_ram(&self, frames: impl IntoIterator<Item = u64>) -> CallResult<()> {
        match frames.into_iter().find(|f| !self.ram.has_frame(*f)) {
            Some(frame) => {
                log::info!("START: frame {frame:#x} is not guest RAM");
                Err(NtStatus::INSUFFICIENT_RESOURCES)
            }
            None => Ok(()),
        }
    }

    /// Stops the object `handle` names and keeps its counts.
    pub fn stop(&self, handle: Handle) -> CallResult<()> {
        let mut manager = self.change();
        let (object, config) = identity(&manager, handle)?;
        let pin = manager.stop(GUEST_OWNER, handle)?;
        self.cover(&config, false);
        self.timeline.object_stopped(object.0);
        self.keep_result(object, config, &pin);
        Ok(())
    }

    /// Closes the handle (stopping its object if started, keeping its counts).
    pub fn close(&self, handle: Handle) -> CallResult<()> {
        let mut manager = self.change();
        let (object, config) = identity(&manager, handle)?;
        if let Some(pin) = manager.close(GUEST_OWNER, handle)? {
            self.cover(&config, false);
            self.timeline.object_stopped(object.0);
            self.keep_result(object, config, &pin);
        }
        Ok(())
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

    /// Stops and closes every object of the guest (VM exit, guest reset) and keeps their
    /// results.
    pub fn close_all(&self) {
        let mut manager = self.change();
        let handles: Vec<_> = manager
            .objects()
            .filter(|(_, o)| o.owner() == GUEST_OWNER)
            .map(|(h, o)| (h, o.id(), o.config().clone()))
            .collect();
        for (handle, object, config) in handles {
            if let Ok(Some(pin)) = manager.close(GUEST_OWNER, handle) {
                self.timeline.object_stopped(object.0);
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
}

fn identity(
    manager: &ObjectManager<PinnedBuffer>,
    handle: Handle,
) -> CallResult<(ObjectId, ObjectConfig)> {
    let o = manager.object(GUEST_OWNER, handle)?;
    Ok((o.id(), o.config().clone()))
}
