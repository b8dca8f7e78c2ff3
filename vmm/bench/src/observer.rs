//! The benchmark's observer of the vCPU threads: when a vCPU last (re-)entered the guest, so
//! the controller can time how long a kicked vCPU takes to be back in KVM_RUN, and the
//! descriptors of the triggers' perf events, so it can signal an overflow naming one.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use vmm::sampler::TriggerId;
use vmm::vcpu::observer::VcpuObserver;

/// A shared monotonic timestamp of the latest KVM_RUN entry, and the perf events' descriptors.
#[derive(Debug)]
pub(crate) struct EntryObserver {
    epoch: Instant,
    last: AtomicU64,
    /// (vCPU, trigger, descriptor), as each vCPU thread opened them.
    fds: Mutex<Vec<(usize, TriggerId, RawFd)>>,
}

impl Default for EntryObserver {
    fn default() -> Self {
        EntryObserver {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            fds: Mutex::new(Vec::new()),
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
}
