//! The registers a stack walk starts from and the unwinders restore.

/// The integer registers the unwinders read and restore, numbered as x86-64 encodes them
/// (and as UNWIND_CODE names them): RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8..R15.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// General-purpose registers by number.
    pub gpr: [u64; 16],
    /// The instruction pointer.
    pub rip: u64,
}

impl Regs {
    /// RSP's number.
    pub const RSP: usize = 4;
    /// RBP's number.
    pub const RBP: usize = 5;

    /// The stack pointer.
    pub fn rsp(&self) -> u64 {
        self.gpr[Self::RSP]
    }

    /// The frame pointer.
    pub fn rbp(&self) -> u64 {
        self.gpr[Self::RBP]
    }

    /// Registers with only RIP, RSP and RBP set.
    pub fn new(rip: u64, rsp: u64, rbp: u64) -> Self {
        let mut r = Regs {
            rip,
            ..Regs::default()
        };
        r.gpr[Self::RSP] = rsp;
        r.gpr[Self::RBP] = rbp;
        r
    }
}
