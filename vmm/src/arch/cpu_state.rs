//! What the VMM reads of a vCPU at a sample or a hypercall: the registers a stack walk starts
//! from, the privilege level, and the paging registers that say which address space it is in.

use introspect::paging::Paging;

/// EFER.LMA: long mode is active.
pub const EFER_LMA: u64 = 1 << 10;

/// The state of the vCPU at a hypercall or a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// RIP.
    pub rip: u64,
    /// The integer registers, numbered as x86-64 encodes them (RAX, RCX, RDX, RBX, RSP, RBP,
    /// RSI, RDI, R8..R15): the stack walker starts from them.
    pub gpr: [u64; 16],
    /// Current privilege level.
    pub cpl: u8,
    /// The vCPU ran 32-bit code in long mode (compatibility mode: CS.L clear with EFER.LMA
    /// set), as a WOW64 process's x86 code runs: its stack holds no x64 frames.
    pub compat: bool,
    /// Paging registers.
    pub paging: Paging,
    /// The GS segment's base (free: it is in the same sync-regs area as the rest). At CPL0 a
    /// Windows or Linux kernel keeps its per-CPU area there.
    pub gs_base: u64,
    /// IA32_KERNEL_GS_BASE, read (one KVM_GET_MSRS) only at the samples whose caller asked
    /// for it ([`crate::profiler::Profiler::wanted_msrs`]): at CPL3 it holds the
    /// kernel's per-CPU base.
    pub kernel_gs_base: Option<u64>,
    /// IA32_LSTAR (the kernel's system-call entry), read only at the samples whose caller
    /// asked for it: it lies in a Windows kernel's image, so it finds the kernel even when no
    /// sample lands in kernel mode.
    pub lstar: Option<u64>,
}

/// The MSRs a sample's caller asks the vCPU to read (one KVM_GET_MSRS for both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WantedMsrs {
    /// IA32_KERNEL_GS_BASE.
    pub kernel_gs_base: bool,
    /// IA32_LSTAR.
    pub lstar: bool,
}

/// IA32_LSTAR: the 64-bit SYSCALL entry point.
pub const MSR_LSTAR: u32 = 0xc000_0082;

/// IA32_KERNEL_GS_BASE: the GS base SWAPGS exchanges with the current one.
pub const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
