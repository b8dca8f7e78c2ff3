//! What each vCPU's samples and hypercalls did: samples taken, counted and lost, counter
//! increments, profile interrupts injected, hypercalls served. Updated from the vCPU threads;
//! READ_STATS, the control API and the run's summary read them (summed for the VM).

use std::sync::atomic::{AtomicU64, Ordering};

/// One vCPU's profiling counters.
#[derive(Debug, Default)]
pub struct VcpuProfileStats {
    /// Samples taken.
    pub samples: AtomicU64,
    /// Samples that counted into at least one object.
    pub attributed: AtomicU64,
    /// Counter increments (one per matching object).
    pub counts: AtomicU64,
    /// Timer ticks that found the previous sample still pending (coalesced kicks: lost samples).
    pub coalesced: AtomicU64,
    /// Profile interrupts injected.
    pub injected: AtomicU64,
    /// Hypercalls served.
    pub hypercalls: AtomicU64,
    /// In-kernel samples that found the vCPU thread in the host (an exit, guest code the host
    /// emulates): counted here, in no object.
    pub host_time: AtomicU64,
}

/// A plain copy of the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Samples taken.
    pub samples: u64,
    /// Samples that counted somewhere.
    pub attributed: u64,
    /// Counter increments.
    pub counts: u64,
    /// Lost samples (coalesced kicks).
    pub coalesced: u64,
    /// Profile interrupts injected.
    pub injected: u64,
    /// Hypercalls served.
    pub hypercalls: u64,
    /// In-kernel samples of host time.
    pub host_time: u64,
}

impl StatsSnapshot {
    /// Samples that fell outside every started object.
    pub fn outside(&self) -> u64 {
        self.samples - self.attributed
    }

    fn add(mut self, o: &StatsSnapshot) -> Self {
        self.samples += o.samples;
        self.attributed += o.attributed;
        self.counts += o.counts;
        self.coalesced += o.coalesced;
        self.injected += o.injected;
        self.hypercalls += o.hypercalls;
        self.host_time += o.host_time;
        self
    }
}

impl VcpuProfileStats {
    /// Counts `n` lost samples (ticks coalesced into one sample, or naming no trigger).
    pub fn lost(&self, n: u64) {
        if n > 0 {
            bump(&self.coalesced, n);
        }
    }

    /// Counts `n` in-kernel samples of host time.
    pub fn host_time(&self, n: u64) {
        bump(&self.host_time, n);
    }

    /// Counts one sample that made `counts` counter increments (guest objects and host
    /// profiles together).
    pub fn sampled(&self, counts: u64) {
        bump(&self.samples, 1);
        if counts > 0 {
            bump(&self.attributed, 1);
            bump(&self.counts, counts);
        }
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            samples: l(&self.samples),
            attributed: l(&self.attributed),
            counts: l(&self.counts),
            coalesced: l(&self.coalesced),
            injected: l(&self.injected),
            hypercalls: l(&self.hypercalls),
            host_time: l(&self.host_time),
        }
    }
}

/// Sums per-vCPU snapshots into VM totals.
pub fn total(per_vcpu: &[StatsSnapshot]) -> StatsSnapshot {
    per_vcpu
        .iter()
        .fold(StatsSnapshot::default(), |a, s| a.add(s))
}

/// Bumps a counter.
pub fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}
