//! x86_64 CPU state: descriptors, entry registers, CPUID and MSRs, and what a sample or a
//! hypercall reads of a running vCPU (`cpu_state`).

pub mod cpu_state;
pub mod cpuid;
pub mod gdt;
pub mod hyperv;
pub mod regs;
