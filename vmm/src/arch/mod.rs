//! x86_64 CPU state: descriptors, entry registers, CPUID and MSRs.

pub mod cpuid;
pub mod gdt;
pub mod hyperv;
pub mod regs;
