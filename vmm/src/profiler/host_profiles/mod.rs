//! Host-side profiles: profiles the VMM owns, which need no agent in the guest ([`profile`]:
//! what one covers and counts), the call stack of each sample they count, walked in guest
//! memory at sample time, and each vCPU's cache of the PE images its walks found ([`stacks`]:
//! also the guest's modules, for the report's symbols).

pub mod guest_awareness;
pub mod profile;
pub mod stacks;

use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use vm_memory::GuestMemoryMmap;

pub use profile::{
    HostProfileError, HostProfileResult, HostProfileSpec, HostProfileSummary, SampleAt,
    SparseCounts, StackCounts, StackKey, DEFAULT_STACK_DEPTH, MAX_STACK_DEPTH,
};
pub use stacks::FoundModule;

use super::timeline::Timelines;
use super::triggers::{Need, Triggers};
use crate::arch::cpu_state::CpuState;
use crate::sampler::probe::ProbeReport;
use crate::sampler::TriggerId;
use guest_awareness::GuestAwareness;
use profile::HostProfile;
use stacks::StackWalker;

/// One stack walk on the sample path, as a [`WalkObserver`] is told of it.
#[derive(Clone, Copy, Debug)]
pub struct Walked<'a> {
    /// The vCPU whose thread walked.
    pub vcpu: usize,
    /// The guest memory walked.
    pub mem: &'a GuestMemoryMmap,
    /// The registers the walk started from.
    pub cpu: &'a CpuState,
    /// Frames found, the sampled PC included.
    pub frames: usize,
    /// How long the walk took, in nanoseconds.
    pub ns: u64,
}

/// Told how long each stack walk on the sample path took, for measurements (`hvprof bench`
/// compares it with the same walk repeated off the vCPU). Production runs have none and read
/// no clock for it.
pub trait WalkObserver: Send + Sync {
    /// A vCPU's thread walked a stack.
    fn walked(&self, walk: Walked<'_>) {
        let _ = walk;
    }
}

/// The VM's host-side profiles and the vCPUs' stack walkers.
pub struct HostProfiles {
    profiles: RwLock<Vec<HostProfile>>,
    mem: GuestMemoryMmap,
    /// A profile claims its trigger on the vCPUs it samples while it runs.
    triggers: Arc<Triggers>,
    /// The probe that found the host's events, for telling users why an event is absent.
    probe: Arc<ProbeReport>,
    /// Per vCPU: only that vCPU's thread walks with it; the lock is never contended.
    walkers: Box<[Mutex<StackWalker>]>,
    /// The guest's processes and threads.
    guest: GuestAwareness,
    /// Where profiles with a timeline record their samples.
    timeline: Arc<Timelines>,
    /// Set once, before the vCPUs run, by a measuring run.
    walk_observer: OnceLock<Arc<dyn WalkObserver>>,
}

impl HostProfiles {
    /// No profiles yet, on the vCPUs of `triggers`; those started with a timeline record into
    /// `timeline`; the guest's processes are timed from `start` (the run's).
    pub fn new(
        mem: GuestMemoryMmap,
        triggers: Arc<Triggers>,
        probe: Arc<ProbeReport>,
        timeline: Arc<Timelines>,
        start: Instant,
    ) -> Self {
        let walkers = (0..triggers.vcpu_count())
            .map(|_| Mutex::new(StackWalker::default()))
            .collect();
        HostProfiles {
            profiles: RwLock::new(Vec::new()),
            guest: GuestAwareness::new(triggers.vcpu_count(), start),
            mem,
            triggers,
            probe,
            walkers,
            timeline,
            walk_observer: OnceLock::new(),
        }
    }

    /// Tells `observer` the time of every stack walk from now on (the first one set stays).
    pub fn observe_walks(&self, observer: Arc<dyn WalkObserver>) {
        let _ = self.walk_observer.set(observer);
    }

    /// The guest's processes and threads, as the samples found them.
    pub fn guest(&self) -> &GuestAwareness {
        &self.guest
    }

    /// Walks the guest kernel's process list a last time, once every vCPU has stopped
    /// (`guest_awareness::process_list`).
    pub fn walk_guest_processes(&self) {
        self.guest.walk_at_end(&self.mem);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<HostProfile>> {
        self.profiles.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<HostProfile>> {
        self.profiles.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a sample vCPU `v` took at `cpu` on trigger `t` in the host profiles sampling on
    /// `t` (only in those that need registers if `registers_only`: the in-kernel sampler
    /// serves the others); returns in how many it counted.
    pub fn record(&self, v: usize, cpu: &CpuState, t: TriggerId, registers_only: bool) -> u64 {
        let all = self.read();
        // The host profiles sampling on this trigger (no allocation on the sample path).
        let profiles = || {
            all.iter()
                .filter(|p| p.trigger == t && (!registers_only || self.need(&p.spec) != Need::Flat))
        };
        if !profiles().any(|p| p.samples_vcpu(v)) {
            return 0;
        }
        // A timeline's time is the sample's: read before the work below (the first walk in a
        // new address space may search for images for a while).
        let now = profiles()
            .any(|p| p.spec.timeline && p.samples_vcpu(v))
            .then(|| self.timeline.now_ns());
        if let Some(t_ns) = now {
            self.timeline.observe(t_ns, cpu.cpl, cpu.rip, &cpu.paging);
        }
        // The guest thread it ran in, once for every profile.
        let mut guest = self.guest.vcpu(v);
        let kernel_paging = guest
            .as_deref()
            .map_or(cpu.paging, |g| self.guest.kernel_paging(g, cpu));
        let who = guest
            .as_deref_mut()
            .and_then(|g| self.guest.identify(v, g, &self.mem, cpu))
            .map(|w| (w.at, w.process_name.as_str()));
        let at = SampleAt {
            ring: false,
            v,
            pc: cpu.rip,
            cr3: cpu.paging.cr3,
            cpl: cpu.cpl,
            who,
        };
        // One walk serves every host profile this sample counts in, at the deepest depth any
        // of them keeps. Without stacks, the image holding the PC is still looked for, so that
        // the guest's modules are known.
        let depth = profiles().map(|p| p.stack_depth(&at)).max().unwrap_or(0);
        let counted = depth > 0 || profiles().any(|p| p.takes(&at));
        let stack = match self.walkers.get(v) {
            Some(walker) if counted => {
                let mut walker = walker.lock().unwrap_or_else(|e| e.into_inner());
                let stack = if depth > 0 {
                    let timed = self.walk_observer.get().map(|o| (o, Instant::now()));
                    let files = at
                        .who
                        .and_then(|(w, _)| self.guest.user_unwinder(w.process));
                    let linux = self.guest.is_linux();
                    let stack =
                        walker.walk_with_files(&self.mem, cpu, depth, files.as_deref(), linux);
                    if let Some((observer, t0)) = timed {
                        observer.walked(Walked {
                            vcpu: v,
                            mem: &self.mem,
                            cpu,
                            frames: stack.pcs.len(),
                            ns: u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX),
                        });
                    }
                    Some(stack)
                } else {
                    walker.note_pc(&self.mem, cpu);
                    None
                };
                // The system-call entry lies in a Windows kernel's image: found from there
                // when no sample lands in it.
                if let Some(lstar) = cpu.lstar {
                    walker.note_address(&self.mem, kernel_paging, lstar);
                }
                if let Some((base, codeview)) = walker.take_new_kernel() {
                    self.guest.kernel_found(base, codeview);
                }
                stack
            }
            _ => None,
        };
        let mut counted = 0;
        for p in profiles() {
            if !p.record(&at, stack.as_ref()) {
                continue;
            }
            counted += 1;
            if let (true, Some(t_ns)) = (p.spec.timeline, now) {
                let pcs = match &stack {
                    Some(s) => &s.pcs[..s.pcs.len().min(p.spec.stack_depth)],
                    None => std::slice::from_ref(&cpu.rip),
                };
                let pcs = if pcs.is_empty() {
                    std::slice::from_ref(&cpu.rip)
                } else {
                    pcs
                };
                let thread = at.who.map(|(w, _)| w.thread);
                self.timeline.sample(v, p.id, t_ns, cpu.cpl, thread, pcs);
            }
        }
        // A Linux process's user frames outside the mappings read: read them again.
        let row = at.who.map(|(w, _)| w.process);
        if let (Some(s), Some(g), Some(row)) = (&stack, guest.as_deref_mut(), row) {
            self.guest.note_stack(g, row, &s.pcs);
        }
        counted
    }

    /// Counts an in-kernel sample of vCPU `v` at `pc`, privilege level `cpl`, on trigger `t`,
    /// taken at `t_ns` on the run's time axis, in the host profiles sampling on `t` that need
    /// nothing else (no CR3 or process filter, no stacks); returns in how many it counted.
    pub fn record_flat(&self, v: usize, t: TriggerId, pc: u64, cpl: u8, t_ns: u64) -> u64 {
        let all = self.read();
        let at = SampleAt {
            ring: true,
            v,
            pc,
            cr3: 0,
            cpl,
            who: None,
        };
        let mut counted = 0;
        for p in all
            .iter()
            .filter(|p| p.trigger == t && self.need(&p.spec) == Need::Flat)
        {
            if !p.record(&at, None) {
                continue;
            }
            counted += 1;
            if p.spec.timeline {
                self.timeline
                    .sample(v, p.id, t_ns, cpl, None, std::slice::from_ref(&pc));
            }
        }
        counted
    }

    /// What a profile of `spec` needs of each sample: its registers for a CR3 or process
    /// filter, a stack, or the guest's threads (named from the registers) while guest
    /// awareness is on, at its kick interval if it has one; else only its PC and CPL.
    fn need(&self, spec: &HostProfileSpec) -> Need {
        match (
            !spec.flat() || (spec.names && self.guest.enabled()),
            spec.kick_interval,
        ) {
            (false, _) => Need::Flat,
            (true, None) => Need::Registers,
            (true, Some(interval)) => Need::RegistersEvery(interval),
        }
    }

    /// Called by vCPU `v`'s thread as it leaves the guest for good: if its samples found a
    /// Windows kernel, its module list is walked once more (drivers loaded since). The walk
    /// reads guest memory, so it happens here, under the vCPU thread's filter, not on the
    /// thread that collects the results.
    pub fn vcpu_exiting(&self, v: usize) {
        self.guest.vcpu_exiting(v);
        if let Some(walker) = self.walkers.get(v) {
            let mut walker = walker.lock().unwrap_or_else(|e| e.into_inner());
            walker.refresh_kernel_modules(&self.mem, self.guest.windows_layout().as_ref());
        }
    }

    /// The PE images the vCPUs found in guest memory while sampling for host profiles, and
    /// the modules on the Windows kernel's list if a sample found the kernel, each once, in the
    /// order found.
    pub fn guest_modules(&self) -> Vec<FoundModule> {
        let mut all: Vec<FoundModule> = Vec::new();
        let mut add = |m: &FoundModule| {
            // Two processes may map different executables at one place in one reused
            // address space: names tell them apart.
            if !all
                .iter()
                .any(|a| a.process == m.process && a.is(&m.image) && same_name(a, m))
            {
                all.push(m.clone());
            }
        };
        for walker in self.walkers.iter() {
            let walker = walker.lock().unwrap_or_else(|e| e.into_inner());
            walker.modules().for_each(&mut add);
        }
        self.guest.user_modules().iter().for_each(&mut add);
        all
    }

    /// Starts a host-side profile; returns its id.
    pub fn start(&self, spec: HostProfileSpec) -> Result<u32, HostProfileError> {
        spec.validate()?;
        let trigger = self
            .triggers
            .sampling()
            .for_event(spec.event.as_deref(), &self.probe)
            .map_err(HostProfileError::Event)?;
        let mut host = self.write();
        let id = u32::try_from(host.len() + 1).unwrap_or(u32::MAX);
        let profile = HostProfile::new(id, spec, self.walkers.len(), trigger);
        let need = self.need(&profile.spec);
        self.triggers
            .claim(trigger, |v| profile.samples_vcpu(v), true, need);
        if profile.spec.timeline {
            self.timeline.profile_started();
        }
        host.push(profile);
        Ok(id)
    }

    /// Stops host profile `id`; its counts stay readable.
    pub fn stop(&self, id: u32) -> Result<(), HostProfileError> {
        let mut host = self.write();
        let p = host
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or(HostProfileError::Unknown(id))?;
        if !p.running {
            return Err(HostProfileError::Stopped(id));
        }
        let need = self.need(&p.spec);
        self.triggers
            .claim(p.trigger, |v| p.samples_vcpu(v), false, need);
        p.running = false;
        if p.spec.timeline {
            self.timeline.profile_stopped();
        }
        Ok(())
    }

    /// Stops every running host profile (VM exit).
    pub fn stop_all(&self) {
        let ids: Vec<u32> = self
            .read()
            .iter()
            .filter(|p| p.running)
            .map(|p| p.id)
            .collect();
        for id in ids {
            let _ = self.stop(id);
        }
    }

    /// Every host profile's counts so far.
    pub fn results(&self) -> Vec<HostProfileResult> {
        self.read().iter().map(HostProfile::result).collect()
    }

    /// Host profile `id`'s counts so far (copying only that profile's), or None when there is
    /// no such profile.
    pub fn result(&self, id: u32) -> Option<HostProfileResult> {
        self.read()
            .iter()
            .find(|p| p.id == id)
            .map(HostProfile::result)
    }

    /// Host profile `id`'s counts, per thread too, without its stacks.
    pub fn counts_now(&self, id: u32) -> Option<HostProfileResult> {
        self.read()
            .iter()
            .find(|p| p.id == id)
            .map(HostProfile::counts_now)
    }

    /// Every host profile's id, spec, state and sample total, without copying its counts.
    pub fn summaries(&self) -> Vec<HostProfileSummary> {
        self.read()
            .iter()
            .map(|p| HostProfileSummary {
                id: p.id,
                spec: p.spec.clone(),
                running: p.running,
                total: p.total(),
            })
            .collect()
    }
}

/// True unless two modules found in one user address space have different names (kernel
/// modules are told apart by place, size and build alone).
fn same_name(a: &FoundModule, b: &FoundModule) -> bool {
    a.process.is_none() || a.name.is_none() || b.name.is_none() || a.name == b.name
}
