//! Epilogues. Windows x64 epilogues have one shape, which lets an unwinder recognise them
//! from the code bytes alone: an optional `add rsp, imm` or `lea rsp, [frame_reg + disp]`,
//! any number of `pop reg`, then `ret` or a `jmp` out of the function (a tail call). A PC
//! inside one has already undone part of the prologue, so the unwind codes no longer apply:
//! the rest of the epilogue is simulated instead.

use std::ops::Range;

use crate::mem::{Memory, Unreadable};
use crate::pe::PAGE;
use crate::Regs;

/// The most bytes an epilogue spans: lea with disp32 (8), eight two-byte pops (16), and an
/// indirect jmp with REX and disp32 (7).
const WINDOW: usize = 48;
/// Integer registers the calling convention preserves; no epilogue pops more.
const MAX_POPS: usize = 10;

/// Where the pops of an epilogue start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// RSP plus this (0 when there is no `add rsp`).
    Rsp(i64),
    /// `lea rsp, [reg + disp]`: the frame register plus this.
    Frame(u8, i64),
}

/// The rest of an epilogue, from the PC on: what its bytes say, independent of the registers
/// (so a decoded one can be kept and applied to later frames at the same PC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Epilog {
    start: Start,
    pops: [u8; MAX_POPS],
    npops: u8,
    /// Bytes `ret imm16` releases after the return address.
    release: u16,
}

impl Epilog {
    /// Recognises an epilogue starting at `rip` in a function spanning `function`.
    pub fn parse(
        mem: &mut dyn Memory,
        rip: u64,
        frame_reg: u8,
        function: Range<u64>,
    ) -> Result<Option<Epilog>, Unreadable> {
        let mut buf = [0u8; WINDOW];
        // The window may end early at a page the guest has not mapped.
        let to_page_end = usize::try_from(PAGE - rip % PAGE).unwrap_or(WINDOW);
        let len = if mem.read(rip, &mut buf).is_ok() {
            WINDOW
        } else {
            let n = to_page_end.min(WINDOW);
            mem.read(rip, &mut buf[..n])?;
            n
        };
        Ok(Self::decode(&buf[..len], rip, frame_reg, function))
    }

    fn decode(code: &[u8], rip: u64, frame_reg: u8, function: Range<u64>) -> Option<Epilog> {
        let at = |i: usize| code.get(i).copied();
        let mut e = Epilog {
            start: Start::Rsp(0),
            pops: [0; MAX_POPS],
            npops: 0,
            release: 0,
        };
        let mut p = 0;
        // add rsp, imm8 / imm32
        if at(0)? == 0x48 && matches!(at(1)?, 0x83 | 0x81) && at(2)? == 0xc4 {
            let (imm, len) = if at(1)? == 0x83 {
                (i64::from(at(3)?.cast_signed()), 4)
            } else {
                (
                    i64::from(i32::from_le_bytes(code.get(3..7)?.try_into().ok()?)),
                    7,
                )
            };
            e.start = Start::Rsp(imm);
            p = len;
        } else if frame_reg != 0 && at(0)? & 0xfe == 0x48 && at(1)? == 0x8d {
            // lea rsp, [frame_reg + disp8/disp32]
            let modrm = at(2)?;
            let (mode, reg, rm) = (modrm >> 6, (modrm >> 3) & 7, modrm & 7);
            let base = rm | (at(0)? & 1) << 3;
            if reg != 4 || base != frame_reg || !(1..=2).contains(&mode) {
                return None;
            }
            // A base of RSP or R12 needs a SIB byte naming no index.
            let mut d = 3;
            if rm == 4 {
                if at(3)? != 0x24 {
                    return None;
                }
                d = 4;
            }
            let disp = if mode == 1 {
                p = d + 1;
                i64::from(at(d)?.cast_signed())
            } else {
                p = d + 4;
                i64::from(i32::from_le_bytes(code.get(d..d + 4)?.try_into().ok()?))
            };
            e.start = Start::Frame(frame_reg, disp);
        }
        loop {
            let reg = match (at(p)?, at(p + 1)) {
                (0x58..=0x5f, _) => {
                    p += 1;
                    at(p - 1)? - 0x58
                }
                (0x41, Some(b @ 0x58..=0x5f)) => {
                    p += 2;
                    b - 0x58 + 8
                }
                _ => break,
            };
            if usize::from(e.npops) == MAX_POPS {
                return None;
            }
            e.pops[usize::from(e.npops)] = reg;
            e.npops += 1;
        }
        let next = |len: usize| rip.wrapping_add((p + len) as u64);
        let outside = |target: u64| !function.contains(&target);
        let ends = match (at(p)?, at(p + 1), at(p + 2)) {
            (0xc3, ..) | (0xf3, Some(0xc3), _) => true,
            (0xc2, Some(lo), Some(hi)) => {
                e.release = u16::from_le_bytes([lo, hi]);
                true
            }
            (0xeb, Some(rel), _) => {
                outside(next(2).wrapping_add_signed(i64::from(rel.cast_signed())))
            }
            (0xe9, ..) => {
                let rel = i32::from_le_bytes(code.get(p + 1..p + 5)?.try_into().ok()?);
                outside(next(5).wrapping_add_signed(i64::from(rel)))
            }
            // jmp qword ptr [...]: an indirect tail call, with or without REX.W.
            (0xff, Some(m), _) => (m >> 3) & 7 == 4 && m >> 6 != 3,
            (0x48, Some(0xff), Some(m)) => (m >> 3) & 7 == 4 && m >> 6 != 3,
            _ => false,
        };
        ends.then_some(e)
    }

    /// Runs the rest of the epilogue on `regs`: the pops, then the return.
    pub fn apply<M: Memory + ?Sized>(
        &self,
        mem: &mut M,
        regs: &mut Regs,
    ) -> Result<(), Unreadable> {
        let mut rsp = match self.start {
            Start::Rsp(add) => regs.rsp().wrapping_add_signed(add),
            Start::Frame(reg, disp) => regs.gpr[usize::from(reg)].wrapping_add_signed(disp),
        };
        for &r in &self.pops[..usize::from(self.npops)] {
            regs.gpr[usize::from(r)] = mem.read_u64(rsp)?;
            rsp = rsp.wrapping_add(8);
        }
        regs.rip = mem.read_u64(rsp)?;
        regs.gpr[Regs::RSP] = rsp.wrapping_add(8 + u64::from(self.release));
        Ok(())
    }
}
