//! The Windows x64 unwinder: one frame up, from a RUNTIME_FUNCTION's UNWIND_INFO (versions 1
//! and 2), as the kernel's RtlVirtualUnwind does.
//!
//! - A PC inside an epilogue unwinds by simulating the rest of the epilogue ([`epilog`]).
//! - Otherwise the unwind codes undo the prologue in reverse; inside the prologue, only the
//!   codes of the instructions already executed count.
//! - Chained unwind info (UNW_FLAG_CHAININFO) continues with the parent function's codes.
//! - PUSH_MACHFRAME restores RIP and RSP from an interrupt or exception frame; otherwise the
//!   return address is popped last.
//!
//! [`UnwindCache`] keeps, per PC, what this decodes from the guest's bytes, so that a frame
//! seen before costs only its stack reads.

mod cache;
mod epilog;
mod info;
#[cfg(test)]
mod tests;

pub use cache::{UnwindCache, REDECODE_WALKS};

use crate::mem::{Memory, Unreadable};
use crate::pe::{Image, RuntimeFunction};
use crate::Regs;
use info::{Info, Op};

/// Chained unwind info is followed at most this many times (a loop in the chain ends there).
const MAX_CHAIN: usize = 32;

/// Why a frame could not be unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UnwindError {
    /// Unwind data or a stack slot is not readable.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// The UNWIND_INFO at this address breaks the format's rules.
    #[error("malformed unwind info at {0:#x}")]
    Malformed(u64),
}

/// What one unwind did besides moving the registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unwound {
    /// RIP and RSP came from a machine frame: the stack may switch here (an interrupt from
    /// user mode, an exception), so the caller's RSP need not be above this frame's.
    pub machine_frame: bool,
}

/// Unwinds the frame of function `f` of `image`, whose current state is `regs` (RIP is the
/// sampled PC, or a return address for callers), to its caller's state.
pub fn unwind(
    mem: &mut dyn Memory,
    image: &Image,
    f: RuntimeFunction,
    regs: &mut Regs,
) -> Result<Unwound, UnwindError> {
    let begin = image.base + u64::from(f.begin);
    let mut info = Info::read(mem, image, f.unwind)?;
    let offset = regs.rip.wrapping_sub(begin);
    if offset >= u64::from(info.prolog_size) {
        let end = image.base + u64::from(f.end);
        if let Some(e) = epilog::Epilog::parse(mem, regs.rip, info.frame_reg, begin..end)? {
            e.apply(mem, regs)?;
            return Ok(Unwound {
                machine_frame: false,
            });
        }
    }
    let mut machine_frame = false;
    let mut prolog_offset = Some(offset);
    for _ in 0..MAX_CHAIN {
        machine_frame |= info.apply(mem, regs, prolog_offset)?;
        let Some(parent) = info.chained else {
            if !machine_frame {
                let rsp = regs.rsp();
                regs.rip = mem.read_u64(rsp)?;
                regs.gpr[Regs::RSP] = rsp.wrapping_add(8);
            }
            return Ok(Unwound { machine_frame });
        };
        // The parent's prologue ran in full before the chained part's.
        info = Info::read(mem, image, parent.unwind)?;
        prolog_offset = None;
    }
    Err(UnwindError::Malformed(image.base + u64::from(f.unwind)))
}

impl Info {
    /// Applies this info's codes to `regs`; with `prolog_offset`, only those of prologue
    /// instructions that end at or before it. Returns whether a machine frame was popped.
    fn apply(
        &self,
        mem: &mut dyn Memory,
        regs: &mut Regs,
        prolog_offset: Option<u64>,
    ) -> Result<bool, UnwindError> {
        let done = |at: u8| prolog_offset.is_none_or(|o| u64::from(at) <= o);
        // Saved-register offsets count from the frame base: the frame register minus its
        // offset once it is set up (the body may move RSP, alloca), RSP until then.
        let mut base = regs.rsp();
        let fp = usize::from(self.frame_reg);
        if fp != 0 && self.ops().any(|(at, op)| op == Op::SetFpReg && done(at)) {
            base = regs.gpr[fp].wrapping_sub(16 * u64::from(self.frame_offset));
        }
        let mut machine_frame = false;
        for (at, op) in self.ops() {
            if op == Op::Bad {
                return Err(UnwindError::Malformed(self.at));
            }
            if !done(at) {
                continue;
            }
            let rsp = regs.rsp();
            match op {
                Op::PushNonvol(r) => {
                    regs.gpr[usize::from(r)] = mem.read_u64(rsp)?;
                    regs.gpr[Regs::RSP] = regs.rsp().wrapping_add(8);
                }
                Op::Alloc(size) => regs.gpr[Regs::RSP] = rsp.wrapping_add(u64::from(size)),
                Op::SetFpReg => {
                    if fp == 0 {
                        return Err(UnwindError::Malformed(self.at));
                    }
                    let frame = regs.gpr[fp].wrapping_sub(16 * u64::from(self.frame_offset));
                    regs.gpr[Regs::RSP] = frame;
                }
                Op::SaveNonvol(r, off) => {
                    regs.gpr[usize::from(r)] = mem.read_u64(base.wrapping_add(u64::from(off)))?;
                }
                Op::MachineFrame(error_code) => {
                    let frame = rsp.wrapping_add(if error_code { 8 } else { 0 });
                    regs.rip = mem.read_u64(frame)?;
                    regs.gpr[Regs::RSP] = mem.read_u64(frame.wrapping_add(24))?;
                    machine_frame = true;
                }
                Op::NoEffect | Op::Bad => {}
            }
        }
        Ok(machine_frame)
    }
}
