//! Per-vCPU exit counters, readable from other threads while the vCPU runs.

use std::sync::atomic::{AtomicU64, Ordering};

/// The exit reasons hvprof counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// Port input.
    IoIn,
    /// Port output.
    IoOut,
    /// MMIO read.
    MmioRead,
    /// MMIO write.
    MmioWrite,
    /// KVM_RUN interrupted by a kick (EINTR / KVM_EXIT_INTR).
    Kick,
    /// HLT handled in user space.
    Hlt,
    /// Shutdown, internal errors, system events and the rest.
    Other,
}

impl ExitKind {
    /// Every kind, in summary order.
    pub const ALL: [ExitKind; 7] = [
        ExitKind::IoIn,
        ExitKind::IoOut,
        ExitKind::MmioRead,
        ExitKind::MmioWrite,
        ExitKind::Kick,
        ExitKind::Hlt,
        ExitKind::Other,
    ];

    /// The name used in summaries.
    pub fn name(self) -> &'static str {
        match self {
            ExitKind::IoIn => "io-in",
            ExitKind::IoOut => "io-out",
            ExitKind::MmioRead => "mmio-read",
            ExitKind::MmioWrite => "mmio-write",
            ExitKind::Kick => "kick",
            ExitKind::Hlt => "hlt",
            ExitKind::Other => "other",
        }
    }
}

/// Exit counters of one vCPU.
#[derive(Debug, Default)]
pub struct ExitCounters {
    counts: [AtomicU64; ExitKind::ALL.len()],
    unclaimed: AtomicU64,
}

impl ExitCounters {
    /// Counts one exit.
    pub fn count(&self, kind: ExitKind) {
        self.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an access no device claimed.
    pub fn count_unclaimed(&self) {
        self.unclaimed.fetch_add(1, Ordering::Relaxed);
    }

    /// The count for `kind`.
    pub fn get(&self, kind: ExitKind) -> u64 {
        self.counts[kind as usize].load(Ordering::Relaxed)
    }

    /// Accesses no device claimed.
    pub fn unclaimed(&self) -> u64 {
        self.unclaimed.load(Ordering::Relaxed)
    }

    /// All exits.
    pub fn total(&self) -> u64 {
        ExitKind::ALL.iter().map(|k| self.get(*k)).sum()
    }
}
