//! What the VMM reads of a vCPU at a sample or a hypercall: the registers a stack walk starts
//! from, the privilege level, and the paging registers that say which address space it is in.

use introspect::paging::Paging;

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
    /// Paging registers.
    pub paging: Paging,
}
