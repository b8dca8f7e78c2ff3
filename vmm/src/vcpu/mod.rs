//! vCPUs: each runs on its own thread as a small state machine driven by requests and kicks.
//!
//! A vCPU thread loops: take pending requests, enter the guest, map the exit to an action
//! (`exit::handle_exit`; a ring of the vCPU's own hypercall doorbell, `doorbell`, is one).
//! Other threads talk to it through a [`VcpuHandle`]: a request goes on the channel, then a
//! kick (signal + `immediate_exit`) makes KVM_RUN return so the thread sees it.

pub mod doorbell;
pub mod exit;
pub mod exit_counters;
pub mod observer;
mod setup;
mod state;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use introspect::paging::Paging;
use kvm_ioctls::{SyncReg, VcpuFd};

use vm_memory::GuestMemoryMmap;

use crate::arch::cpu_state::{CpuState, WantedMsrs, EFER_LMA, MSR_KERNEL_GS_BASE, MSR_LSTAR};
use crate::firmware::rom::ReadOnlySlot;
use crate::outcome::{RunOutcome, StopSignal};
use crate::profiler::timeline::{ExitSite, SLOW_EXIT_NS};
use crate::profiler::Profiler;
use crate::sampler::vcpu::VcpuSampler;
use crate::seccomp::{Seccomp, ThreadKind};
use crate::signals::KickTable;
use devices::{Bus, Origin};
use doorbell::{Doorbell, DoorbellPorts};
use exit::{handle_exit, Buses, ExitAction};
use exit_counters::ExitCounters;
use report::timeline::MarkerKind;
pub use setup::{configure_vcpu, SetupError};
use state::State;

/// KVM_MP_STATE_UNINITIALIZED: an application processor waiting for INIT/SIPI.
pub const MP_STATE_UNINITIALIZED: u32 = 1;
/// KVM_MP_STATE_HALTED.
pub const MP_STATE_HALTED: u32 = 3;
const RFLAGS_IF: u64 = 1 << 9;

/// What a vCPU was doing when probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// vCPU index.
    pub index: usize,
    /// KVM_MP_STATE_*.
    pub mp_state: u32,
    /// RFLAGS.IF.
    pub interrupts_enabled: bool,
    /// RIP.
    pub rip: u64,
}

impl Probe {
    /// True when nothing but an NMI, INIT or SIPI can make this vCPU run again.
    pub fn is_stuck(&self) -> bool {
        self.mp_state == MP_STATE_UNINITIALIZED
            || (self.mp_state == MP_STATE_HALTED && !self.interrupts_enabled)
    }
}

/// True when every vCPU is stuck and at least one halted with interrupts off: the guest can
/// never run again.
pub fn guest_is_hung(probes: &[Probe]) -> bool {
    probes.iter().all(Probe::is_stuck) && probes.iter().any(|p| p.mp_state == MP_STATE_HALTED)
}

pub use state::Request;

/// What the VM shares with every vCPU thread.
#[derive(Clone)]
pub struct SharedState {
    /// Port I/O bus.
    pub pio: Arc<Bus>,
    /// MMIO bus.
    pub mmio: Arc<Bus>,
    /// Ends the run.
    pub stop: Arc<StopSignal>,
    /// Guest RAM (for reading instruction bytes in error reports).
    pub mem: GuestMemoryMmap,
    /// The firmware's read-only memory, if any (also for error reports).
    pub firmware: Option<Arc<ReadOnlySlot>>,
    /// The hypercall doorbell's ports, which each vCPU answers itself.
    pub doorbell: DoorbellPorts,
    /// Profile objects, samples and hypercalls.
    pub profiler: Arc<Profiler>,
    /// Where each vCPU thread can be kicked; every vCPU thread enters its own slot.
    pub kicks: Arc<KickTable>,
    /// Watches the thread at the points measurements need (`hvprof bench`); None in a
    /// production run, which then pays one `None` check per guest entry.
    pub observer: Option<Arc<dyn observer::VcpuObserver>>,
    /// Whether the vCPU threads filter their system calls.
    pub seccomp: Seccomp,
}

/// A configured vCPU, ready to start on its own thread.
pub struct Vcpu {
    index: usize,
    fd: VcpuFd,
    shared: SharedState,
    requests: Receiver<Request>,
    sender: Sender<Request>,
    counters: Arc<ExitCounters>,
    sync_regs: bool,
    /// This vCPU's side of the hypercall doorbell (its latch and last status).
    doorbell: Doorbell,
    /// What is open on the run's time axis (only while a timeline records).
    marks: OpenMarks,
}

/// A vCPU's markers begun and not yet ended, in ns from the run's start.
#[derive(Default)]
struct OpenMarks {
    /// A sample found it halted (HLT) at this time; ends when it is seen running.
    halted: Option<u64>,
    /// It was paused at this time.
    paused: Option<u64>,
}

impl Vcpu {
    /// Wraps a configured vCPU fd. `sync_regs` says whether KVM_CAP_SYNC_REGS is available.
    pub fn new(index: usize, mut fd: VcpuFd, shared: SharedState, sync_regs: bool) -> Self {
        if sync_regs {
            fd.set_sync_valid_reg(SyncReg::Register);
            fd.set_sync_valid_reg(SyncReg::SystemRegister);
        }
        let (sender, requests) = channel();
        let counters = Arc::new(ExitCounters::default());
        let doorbell = Doorbell::new(shared.doorbell);
        Vcpu {
            index,
            fd,
            shared,
            doorbell,
            requests,
            sender,
            counters,
            sync_regs,
            marks: OpenMarks::default(),
        }
    }

    /// Starts the vCPU thread.
    pub fn start(self) -> std::io::Result<VcpuHandle> {
        let index = self.index;
        let tx = self.sender.clone();
        let counters = self.counters.clone();
        let self_kicks = self.shared.kicks.clone();
        let thread = std::thread::Builder::new()
            .name(format!("vcpu{index}"))
            .spawn(move || self.run())?;
        let requester = VcpuRequester {
            index,
            tx,
            kicks: self_kicks,
        };
        Ok(VcpuHandle {
            requester,
            counters,
            thread,
        })
    }

    fn run(mut self) {
        let kicks = self.shared.kicks.clone();
        let entered = kicks.enter(self.index, self.fd.get_kvm_run());
        let (mut sampler, ring, errors) =
            VcpuSampler::for_current_thread(self.shared.profiler.sampling());
        for e in errors {
            log::error!("vCPU {}: {e}; it is not sampled on that", self.index);
        }
        if let Some(ring) = ring {
            self.shared.profiler.register_ring(self.index, ring);
        }
        if let Some(observer) = &self.shared.observer {
            for t in 0..self.shared.profiler.sampling().len() {
                observer.trigger_opened(self.index, t, sampler.fd(t));
            }
        }
        // Everything the thread sets up for itself is done: from here on it runs guest code.
        if let Err(e) = crate::seccomp::install(ThreadKind::Vcpu, self.shared.seccomp) {
            self.shared.stop.request(RunOutcome::HostError(format!(
                "vCPU {}: {}",
                self.index,
                report::chain::with_causes(&e)
            )));
            return;
        }
        let mut generation = None;
        let mut state = State::Running;
        loop {
            state = match state {
                State::Running => {
                    let now = self.shared.profiler.timer_generation();
                    if generation != Some(now) {
                        generation = Some(now);
                        self.arm(&mut sampler);
                    }
                    self.running(&mut sampler)
                }
                State::Paused => self.paused(&mut sampler),
                State::Exited => break,
            };
            self.mark_pause(state);
        }
        self.end_halt();
        self.mark_pause(State::Exited);
        self.shared.profiler.vcpu_exiting(self.index);
        drop(sampler);
        // Leave the kick table before the vCPU fd (and its kvm_run page) goes with `self`.
        drop(entered);
    }

    /// Arms this vCPU's triggers as the started objects and host profiles need them.
    fn arm(&self, sampler: &mut VcpuSampler) {
        let profiler = &self.shared.profiler;
        for t in 0..profiler.sampling().len() {
            if let Err(e) = sampler.set(t, profiler.serving(self.index, t)) {
                log::error!(
                    "vCPU {}: cannot set its {} trigger: {e}",
                    self.index,
                    profiler.sampling().name(t)
                );
            }
        }
    }

    /// Serves a request in `state` and returns the state it leads to.
    fn on_request(&self, req: Request, state: State) -> State {
        match &req {
            // The requester may have given up waiting; that is fine.
            Request::Probe(reply) => {
                let _ = reply.send(self.probe());
            }
            Request::Pause(ack) => {
                let _ = ack.send(self.index);
            }
            Request::Resume | Request::Stop => {}
        }
        state.after(&req)
    }

    /// The running state: take pending requests, then one `KVM_RUN`.
    fn running(&mut self, sampler: &mut VcpuSampler) -> State {
        while let Ok(req) = self.requests.try_recv() {
            match self.on_request(req, State::Running) {
                State::Running => {}
                next => return next,
            }
        }
        if self.shared.stop.is_requested() {
            return State::Exited;
        }
        if let Some(observer) = &self.shared.observer {
            observer.entering(self.index);
        }
        let buses = Buses {
            pio: &self.shared.pio,
            mmio: &self.shared.mmio,
        };
        let timeline = self.shared.profiler.timeline();
        // One relaxed load per exit when no timeline records.
        let timed = timeline.recording();
        let mut slow = None;
        let action = match self.fd.run() {
            Ok(exit) => {
                let site = if timed { ExitSite::of(&exit) } else { None };
                let start = site.map(|_| timeline.now_ns());
                let action = handle_exit(
                    exit,
                    &buses,
                    &mut self.doorbell,
                    &Origin { vcpu: self.index },
                    &self.counters,
                );
                slow = site.zip(start);
                action
            }
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                self.counters.count(exit_counters::ExitKind::Kick);
                ExitAction::Kicked
            }
            Err(e) => ExitAction::Stop(RunOutcome::HostError(format!(
                "KVM_RUN failed on vCPU {}: {e}",
                self.index
            ))),
        };
        if let Some((site, start)) = slow {
            self.mark_exit(site, start);
        }
        match action {
            ExitAction::Continue => State::Running,
            ExitAction::Hypercall(gpa) => {
                self.hypercall(gpa);
                State::Running
            }
            ExitAction::Kicked => {
                // Clear before looking at requests, so a kick that arrives from now on is
                // seen either by the request loop or by the next KVM_RUN.
                self.fd.set_kvm_immediate_exit(0);
                let profiler = &self.shared.profiler;
                let mut cpu = None;
                let stray = sampler.take(|t| {
                    let cpu = *cpu.get_or_insert_with(|| {
                        let mut cpu = self.cpu_state();
                        let wanted = profiler.wanted_msrs(self.index);
                        if wanted != WantedMsrs::default() {
                            self.read_msrs(wanted, &mut cpu);
                        }
                        cpu
                    });
                    profiler.on_tick(self.index, &cpu, t);
                });
                if stray > 0 {
                    profiler.count_lost(self.index, stray);
                }
                if let Some(cpu) = cpu {
                    self.mark_halt(&cpu);
                }
                State::Running
            }
            ExitAction::Stop(outcome) => self.finish(outcome),
            ExitAction::Shutdown => {
                let rip = self.rip();
                self.finish(RunOutcome::TripleFault {
                    vcpu: self.index,
                    rip,
                })
            }
            ExitAction::InternalError => {
                let detail = setup::describe_internal_error(
                    &mut self.fd,
                    &self.shared.mem,
                    self.shared.firmware.as_deref(),
                );
                self.finish(RunOutcome::InternalError {
                    vcpu: self.index,
                    detail,
                })
            }
        }
    }

    /// A port or MMIO exit at `site` whose handling began at `start`: a marker if it took
    /// longer than the timeline's threshold. Either way the vCPU ran, so a halt has ended.
    fn mark_exit(&mut self, site: ExitSite, start: u64) {
        let timeline = self.shared.profiler.timeline();
        let end = timeline.now_ns();
        if end.saturating_sub(start) > SLOW_EXIT_NS {
            timeline.marker(Some(self.index), MarkerKind::Exit, start, end, site.name());
        }
        self.end_halt_at(start);
    }

    /// After a sample at `cpu` while a timeline records: is the vCPU halted? HLT stays in
    /// the kernel with the in-kernel irqchip, so a halt is seen by the samples that find it
    /// (KVM_GET_MP_STATE, asked only of CPL0 samples: HLT faults at any other level): it
    /// begins at the first and ends at the first sample or exit that finds the vCPU running,
    /// each within a sampling interval of the HLT and the wake-up.
    fn mark_halt(&mut self, cpu: &CpuState) {
        let timeline = self.shared.profiler.timeline();
        if !timeline.recording() {
            self.marks.halted = None;
            return;
        }
        let halted = cpu.cpl == 0
            && self
                .fd
                .get_mp_state()
                .is_ok_and(|s| s.mp_state == MP_STATE_HALTED);
        let now = timeline.now_ns();
        match (halted, self.marks.halted) {
            (true, None) => self.marks.halted = Some(now),
            (false, Some(_)) => self.end_halt_at(now),
            _ => {}
        }
    }

    /// Ends an open halt at `end`.
    fn end_halt_at(&mut self, end: u64) {
        if let Some(start) = self.marks.halted.take() {
            self.shared.profiler.timeline().marker(
                Some(self.index),
                MarkerKind::Halt,
                start,
                end,
                "halted".into(),
            );
        }
    }

    /// Ends an open halt now (the thread leaves the guest).
    fn end_halt(&mut self) {
        if self.marks.halted.is_some() {
            let now = self.shared.profiler.timeline().now_ns();
            self.end_halt_at(now);
        }
    }

    /// Opens a pause marker as the vCPU enters `Paused`, ends it as it leaves.
    fn mark_pause(&mut self, state: State) {
        let timeline = self.shared.profiler.timeline();
        match (state, self.marks.paused) {
            (State::Paused, None) if timeline.recording() => {
                self.marks.paused = Some(timeline.now_ns());
            }
            (State::Running | State::Exited, Some(start)) => {
                self.marks.paused = None;
                let now = timeline.now_ns();
                timeline.marker(
                    Some(self.index),
                    MarkerKind::Pause,
                    start,
                    now,
                    "paused".into(),
                );
            }
            _ => {}
        }
    }

    /// The paused state: outside `KVM_RUN`, waiting for the next request.
    fn paused(&mut self, sampler: &mut VcpuSampler) -> State {
        let next = match self.requests.recv() {
            Ok(req) => self.on_request(req, State::Paused),
            Err(_) => State::Exited,
        };
        if let State::Running = next {
            // Ticks and kicks that arrived while paused sample nothing: the guest did not run.
            sampler.discard();
            self.fd.set_kvm_immediate_exit(0);
        }
        next
    }

    /// Runs the hypercall whose request block is at `gpa`, which this vCPU rang during the
    /// exit just handled, before re-entering the guest, and records its status for the
    /// doorbell's status port.
    fn hypercall(&mut self, gpa: u64) {
        if self.marks.halted.is_some() {
            self.end_halt(); // it ran: the doorbell is an OUT
        }
        let cpu = self.cpu_state();
        let status = self.shared.profiler.hypercall(self.index, gpa, &cpu);
        self.doorbell.set_status(status.0);
    }

    /// The registers samples and hypercalls need, from the sync-regs area when KVM fills it.
    fn cpu_state(&self) -> CpuState {
        let (regs, sregs) = if self.sync_regs {
            let s = self.fd.sync_regs();
            (s.regs, s.sregs)
        } else {
            match (self.fd.get_regs(), self.fd.get_sregs()) {
                (Ok(r), Ok(s)) => (r, s),
                _ => {
                    return CpuState {
                        cpl: 3,
                        ..CpuState::default()
                    }
                }
            }
        };
        let protected = sregs.cr0 & 1 != 0;
        CpuState {
            rip: regs.rip,
            gpr: [
                regs.rax, regs.rcx, regs.rdx, regs.rbx, regs.rsp, regs.rbp, regs.rsi, regs.rdi,
                regs.r8, regs.r9, regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15,
            ],
            cpl: if protected { sregs.ss.dpl } else { 0 },
            compat: sregs.efer & EFER_LMA != 0 && sregs.cs.l == 0,
            paging: Paging {
                cr0: sregs.cr0,
                cr3: sregs.cr3,
                cr4: sregs.cr4,
                efer: sregs.efer,
            },
            gs_base: sregs.gs.base,
            kernel_gs_base: None,
            lstar: None,
        }
    }

    /// Reads the MSRs `wanted` names into `cpu`, by one KVM_GET_MSRS (left None where KVM
    /// refuses one).
    fn read_msrs(&self, wanted: WantedMsrs, cpu: &mut CpuState) {
        let entry = |index| kvm_bindings::kvm_msr_entry {
            index,
            ..Default::default()
        };
        let mut list = Vec::with_capacity(2);
        if wanted.kernel_gs_base {
            list.push(entry(MSR_KERNEL_GS_BASE));
        }
        if wanted.lstar {
            list.push(entry(MSR_LSTAR));
        }
        let Ok(mut msrs) = kvm_bindings::Msrs::from_entries(&list) else {
            return;
        };
        let Ok(read) = self.fd.get_msrs(&mut msrs) else {
            return;
        };
        // KVM reads them in order and stops at the first it refuses.
        for e in msrs.as_slice().iter().take(read) {
            match e.index {
                MSR_KERNEL_GS_BASE => cpu.kernel_gs_base = Some(e.data),
                MSR_LSTAR => cpu.lstar = Some(e.data),
                _ => {}
            }
        }
    }

    fn finish(&self, outcome: RunOutcome) -> State {
        self.shared.stop.request(outcome);
        State::Exited
    }

    /// The general registers: from the sync-regs area when KVM fills it, else by ioctl.
    fn regs(&self) -> Option<kvm_bindings::kvm_regs> {
        if self.sync_regs {
            Some(self.fd.sync_regs().regs)
        } else {
            self.fd.get_regs().ok()
        }
    }

    fn rip(&self) -> Option<u64> {
        self.regs().map(|r| r.rip)
    }

    fn probe(&self) -> Probe {
        let regs = self.regs();
        Probe {
            index: self.index,
            mp_state: self.fd.get_mp_state().map_or(0, |s| s.mp_state),
            interrupts_enabled: regs.is_some_and(|r| r.rflags & RFLAGS_IF != 0),
            rip: regs.map_or(0, |r| r.rip),
        }
    }
}

/// A cloneable way to send requests to a vCPU thread and kick it.
#[derive(Clone)]
pub struct VcpuRequester {
    index: usize,
    tx: Sender<Request>,
    kicks: Arc<KickTable>,
}

impl VcpuRequester {
    /// The vCPU index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Sends a request and kicks the vCPU so it sees it promptly. False if the thread has
    /// left its run loop.
    pub fn request(&self, req: Request) -> bool {
        let sent = self.tx.send(req).is_ok();
        if sent {
            self.kicks.kick(self.index);
        }
        sent
    }

    /// A requester whose requests arrive on the returned receiver, with no thread to kick: a
    /// made-up vCPU for tests of its requesters (the API's pause).
    #[cfg(test)]
    pub(crate) fn detached(index: usize) -> (Self, Receiver<Request>) {
        let (tx, rx) = channel();
        let kicks = Arc::new(KickTable::new(index + 1));
        (VcpuRequester { index, tx, kicks }, rx)
    }

    /// Sends `signal` to the vCPU thread (a kick or a sampling tick); false if it is not
    /// running.
    pub fn signal(&self, signal: i32) -> bool {
        self.kicks.signal(self.index, signal)
    }

    /// Queues `signal` with `value` to the vCPU thread; false if it is not running.
    pub fn queue_signal(&self, signal: i32, value: i32) -> bool {
        self.kicks.queue(self.index, signal, value)
    }
}

/// A running vCPU thread.
pub struct VcpuHandle {
    requester: VcpuRequester,
    counters: Arc<ExitCounters>,
    thread: JoinHandle<()>,
}

impl VcpuHandle {
    /// A requester for this vCPU, valid until `stop_and_join`.
    pub fn requester(&self) -> VcpuRequester {
        self.requester.clone()
    }

    /// The vCPU's exit counters.
    pub fn counters(&self) -> &Arc<ExitCounters> {
        &self.counters
    }

    /// Stops the thread and waits for it.
    pub fn stop_and_join(self) -> Arc<ExitCounters> {
        self.requester.request(Request::Stop);
        if self.thread.join().is_err() {
            log::error!("vCPU {} thread panicked", self.requester.index);
        }
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(mp_state: u32, interrupts_enabled: bool) -> Probe {
        Probe {
            index: 0,
            mp_state,
            interrupts_enabled,
            rip: 0,
        }
    }

    #[test]
    fn cli_hlt_on_every_vcpu_is_a_hang() {
        assert!(guest_is_hung(&[
            p(MP_STATE_HALTED, false),
            p(MP_STATE_HALTED, false)
        ]));
    }

    #[test]
    fn aps_never_started_do_not_hide_a_hang() {
        assert!(guest_is_hung(&[
            p(MP_STATE_HALTED, false),
            p(MP_STATE_UNINITIALIZED, false)
        ]));
    }

    #[test]
    fn idle_with_interrupts_on_is_not_a_hang() {
        assert!(!guest_is_hung(&[p(MP_STATE_HALTED, true)]));
        assert!(!guest_is_hung(&[p(MP_STATE_HALTED, false), p(0, false)]));
        assert!(!guest_is_hung(&[p(MP_STATE_UNINITIALIZED, false)]));
    }
}
