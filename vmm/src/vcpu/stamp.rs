//! When a vCPU last (re-)entered the guest, for measurements: `hvprof bench` kicks a vCPU and
//! times how long it takes to be back in KVM_RUN. Only present while benchmarking.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A shared monotonic timestamp of the latest KVM_RUN entry.
#[derive(Debug)]
pub struct EntryStamp {
    epoch: Instant,
    last: AtomicU64,
}

impl Default for EntryStamp {
    fn default() -> Self {
        EntryStamp {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl EntryStamp {
    /// Nanoseconds since the stamp was created.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records an entry now.
    pub fn mark(&self) {
        self.last.store(self.now_ns(), Ordering::Release);
    }

    /// The latest entry, in nanoseconds since creation.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }
}
