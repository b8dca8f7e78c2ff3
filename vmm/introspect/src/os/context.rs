//! Naming the thread a sample ran in, once per thread change (interface; WP2 fills it in).

use super::{GuestOs, IdentifyError, Identity, SampleRegs};
use crate::mem::Memory;

/// Counters of one vCPU's identification work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContextStats {
    /// Samples identified from the cache (same thread pointer, or a cached one re-checked).
    pub hits: u64,
    /// Samples whose thread had to be read.
    pub reads: u64,
    /// Samples that could not be identified.
    pub failures: u64,
}

/// One vCPU's view of the guest kernel: its per-CPU base and the threads it has seen.
#[derive(Debug)]
pub struct GuestContext {
    os: GuestOs,
    stats: ContextStats,
}

impl GuestContext {
    /// Nothing known yet about the vCPU, in the kernel `os`.
    pub fn new(os: GuestOs) -> Self {
        GuestContext {
            os,
            stats: ContextStats::default(),
        }
    }

    /// The kernel this context reads.
    pub fn os(&self) -> &GuestOs {
        &self.os
    }

    /// The thread (and its process) the vCPU ran when sampled with `regs`. `kmem` reads
    /// kernel-virtual memory through the kernel's page tables.
    pub fn identify(
        &mut self,
        kmem: &mut dyn Memory,
        regs: &SampleRegs,
    ) -> Result<&Identity, IdentifyError> {
        let _ = (kmem, regs);
        self.stats.failures += 1;
        Err(IdentifyError::NoPerCpuBase)
    }

    /// True when the caller should read IA32_KERNEL_GS_BASE at this vCPU's next sample.
    pub fn wants_kernel_gs_base(&self) -> bool {
        false
    }

    /// What identification has cost so far.
    pub fn stats(&self) -> ContextStats {
        self.stats
    }
}
