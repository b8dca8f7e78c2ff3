//! Reading a guest from outside: what hvprof learns from guest memory alone, read-only and
//! treating every byte as hostile.
//!
//! Call stacks: given a sampled vCPU's registers and read-only access to its address space, [`walk`]
//! returns the return addresses of the stack, choosing an unwinder per frame:
//!
//! - inside a PE32+ image mapped in the guest ([`pe`], found and cached by [`ImageCache`]),
//!   the image's own unwind data, interpreted as the Windows x64 unwinder does ([`x64`]);
//! - anywhere else, the frame-pointer chain ([`fp`]).
//!
//! Windows kernels: [`nt`] finds ntoskrnl in guest memory and walks its loaded-module list.
//!
//! Address spaces: [`paging`] walks the guest's own page tables (every x86 paging mode) from
//! guest-physical memory, to translate a guest-virtual address or find a buffer's frames.
//!
//! The guest controls every byte read: each read is bounded and checked, every loop has a
//! fixed bound, nothing is allocated by a size the guest chose, and a walk that cannot go on
//! ends with the frames it has and the reason it stopped ([`End`]).

pub mod fp;
mod images;
pub mod mem;
pub mod nt;
pub mod paging;
pub mod pe;
mod walk;
pub mod x64;

#[cfg(test)]
mod testimage;

pub use images::{space_of, ImageCache, KERNEL_SPACE};
pub use mem::{Memory, Regions, Unreadable};
pub use walk::{walk, End, Options, Stack};

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
