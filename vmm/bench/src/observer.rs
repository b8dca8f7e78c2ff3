//! The benchmark's observer of the vCPU threads: when a vCPU last (re-)entered the guest, so
//! the controller can time how long a kicked vCPU takes to be back in KVM_RUN; the
//! descriptors of the triggers' perf events, so it can signal an overflow naming one; and,
//! while asked to, how long each sample's stack walk took and the registers of the last one,
//! so the controller can repeat that walk off the vCPU.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use vm_memory::GuestMemoryMmap;
use vmm::arch::cpu_state::CpuState;
use vmm::profiler::host_profiles::{WalkObserver, Walked};
use vmm::sampler::TriggerId;
use vmm::vcpu::observer::VcpuObserver;

/// The sample path's stack walks while recorded.
#[derive(Debug, Default)]
pub(crate) struct Walks {
    /// Recording (the controller's stack kind is being timed).
    on: bool,
    /// Each walk's nanoseconds per frame.
    pub(crate) ns_per_frame: Vec<f64>,
    /// The memory and registers of the latest walk, and its frames.
    pub(crate) last: Option<(GuestMemoryMmap, CpuState, usize)>,
}

/// A shared monotonic timestamp of the latest KVM_RUN entry, and the perf events' descriptors.
#[derive(Debug)]
pub(crate) struct EntryObserver {
    epoch: Instant,
    last: AtomicU64,
    /// (vCPU, trigger, descriptor), as each vCPU thread opened them.
    fds: Mutex<Vec<(usize, TriggerId, RawFd)>>,
    walks: Mutex<Walks>,
}

impl Default for EntryObserver {
    fn default() -> Self {
        EntryObserver {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            fds: Mutex::new(Vec::new()),
            walks: Mutex::new(Walks::default()),
        }
    }
}

impl EntryObserver {
    /// Nanoseconds since the observer was created.
    pub(crate) fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The latest entry, in nanoseconds since creation.
    pub(crate) fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// The descriptor of vCPU `v`'s perf event for trigger `t`, once its thread opened it.
    pub(crate) fn trigger_fd(&self, v: usize, t: TriggerId) -> Option<RawFd> {
        let fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
        fds.iter()
            .find(|(vcpu, trigger, _)| (*vcpu, *trigger) == (v, t))
            .map(|(_, _, fd)| *fd)
    }

    /// Starts recording the sample path's walks, forgetting any before.
    pub(crate) fn record_walks(&self) {
        *self.walks.lock().unwrap_or_else(|e| e.into_inner()) = Walks {
            on: true,
            ..Walks::default()
        };
    }

    /// Stops recording; returns what was recorded.
    pub(crate) fn take_walks(&self) -> Walks {
        std::mem::take(&mut *self.walks.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl WalkObserver for EntryObserver {
    fn walked(&self, walk: Walked<'_>) {
        let mut walks = self.walks.lock().unwrap_or_else(|e| e.into_inner());
        if walks.on && walk.frames > 0 {
            walks.ns_per_frame.push(walk.ns as f64 / walk.frames as f64);
            walks.last = Some((walk.mem.clone(), *walk.cpu, walk.frames));
        }
    }
}

impl VcpuObserver for EntryObserver {
    /// Records an entry now (of any vCPU: the bench's guest has one).
    fn entering(&self, _vcpu: usize) {
        self.last.store(self.now_ns(), Ordering::Release);
    }

    fn trigger_opened(&self, vcpu: usize, trigger: TriggerId, fd: Option<RawFd>) {
        if let Some(fd) = fd {
            let mut fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
            fds.push((vcpu, trigger, fd));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_descriptors_are_kept() {
        let o = EntryObserver::default();
        assert_eq!(o.last(), 0);
        std::thread::sleep(std::time::Duration::from_millis(1));
        o.entering(0);
        assert!(o.last() > 0 && o.last() <= o.now_ns());
        o.trigger_opened(0, 1, Some(7));
        o.trigger_opened(0, 0, None);
        assert_eq!(o.trigger_fd(0, 1), Some(7));
        assert_eq!(o.trigger_fd(0, 0), None);
        assert_eq!(o.trigger_fd(1, 1), None);
    }

    #[test]
    fn walks_are_kept_only_while_recorded() {
        let o = EntryObserver::default();
        let mem = GuestMemoryMmap::from_ranges(&[(vm_memory::GuestAddress(0), 0x1000)]).unwrap();
        let cpu = CpuState::default();
        let walk = |frames, ns| Walked {
            vcpu: 0,
            mem: &mem,
            cpu: &cpu,
            frames,
            ns,
        };
        o.walked(walk(16, 1600));
        assert!(o.take_walks().ns_per_frame.is_empty());
        o.record_walks();
        o.walked(walk(16, 1600));
        o.walked(walk(0, 5));
        o.walked(walk(8, 400));
        let w = o.take_walks();
        assert_eq!(w.ns_per_frame, [100.0, 50.0]);
        assert_eq!(w.last.map(|(_, _, frames)| frames), Some(8));
        o.walked(walk(16, 1600));
        assert!(o.take_walks().ns_per_frame.is_empty());
    }
}
