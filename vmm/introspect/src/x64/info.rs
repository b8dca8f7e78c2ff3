//! UNWIND_INFO as it lies in the image: a 4-byte header, up to 255 two-byte unwind-code
//! slots, and for chained info the parent's RUNTIME_FUNCTION after them.

use super::UnwindError;
use crate::mem::Memory;
use crate::pe::{Image, RuntimeFunction};

const FLAG_CHAININFO: u8 = 4;

/// One UNWIND_INFO, read and checked.
pub(super) struct Info {
    /// Its guest address, for error messages.
    pub at: u64,
    pub prolog_size: u8,
    pub frame_reg: u8,
    /// The frame register's offset from RSP, in units of 16 bytes.
    pub frame_offset: u8,
    count: usize,
    codes: [u8; 2 * 255],
    pub chained: Option<RuntimeFunction>,
}

/// What one unwind code (one or more slots) does to the registers, undone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    /// UWOP_PUSH_NONVOL: the register was pushed.
    PushNonvol(u8),
    /// UWOP_ALLOC_SMALL and UWOP_ALLOC_LARGE: RSP went down by this many bytes.
    Alloc(u32),
    /// UWOP_SET_FPREG: the frame register was set to RSP + 16 * frame offset.
    SetFpReg,
    /// UWOP_SAVE_NONVOL(_FAR): the register was stored at this offset from the frame base.
    SaveNonvol(u8, u32),
    /// UWOP_PUSH_MACHFRAME: the CPU pushed an interrupt frame (true: with an error code).
    MachineFrame(bool),
    /// XMM saves and version 2's epilogue descriptors: nothing to undo in the integer state.
    NoEffect,
    /// An unknown code, or one whose operand slots run past the count.
    Bad,
}

impl Info {
    /// Reads the UNWIND_INFO at `rva` of `image`.
    pub fn read(mem: &mut dyn Memory, image: &Image, rva: u32) -> Result<Info, UnwindError> {
        let at = image.base + u64::from(rva);
        let malformed = UnwindError::Malformed(at);
        let inside = |len: u64| u64::from(rva) + len <= u64::from(image.size);
        if !inside(4) {
            return Err(malformed);
        }
        let mut head = [0u8; 4];
        mem.read(at, &mut head)?;
        // Versions 1 and 2 differ only in version 2's epilogue descriptors, skipped here.
        let (version, flags) = (head[0] & 7, head[0] >> 3);
        if !(1..=2).contains(&version) {
            return Err(malformed);
        }
        let count = usize::from(head[2]);
        let mut info = Info {
            at,
            prolog_size: head[1],
            frame_reg: head[3] & 0xf,
            frame_offset: head[3] >> 4,
            count,
            codes: [0; 2 * 255],
            chained: None,
        };
        if !inside(4 + 2 * count as u64) {
            return Err(malformed);
        }
        mem.read(at + 4, &mut info.codes[..2 * count])?;
        if flags & FLAG_CHAININFO != 0 {
            // The slot array is padded to an even count before the parent's entry.
            let parent = rva + 4 + 2 * ((u32::from(head[2]) + 1) & !1);
            if !inside(u64::from(parent - rva) + 12) {
                return Err(malformed);
            }
            let f = image.entry(mem, parent)?;
            info.chained = Some(image.checked(f).ok_or(malformed)?);
        }
        Ok(info)
    }

    fn slot(&self, i: usize) -> u16 {
        u16::from_le_bytes([self.codes[2 * i], self.codes[2 * i + 1]])
    }

    /// The codes in order (the prologue's last instruction first), each with the prologue
    /// offset its instruction ends at. A malformed code is yielded as [`Op::Bad`] and ends
    /// the sequence.
    pub fn ops(&self) -> impl Iterator<Item = (u8, Op)> + '_ {
        let mut i = 0;
        std::iter::from_fn(move || {
            if i >= self.count {
                return None;
            }
            let [at, op] = self.slot(i).to_le_bytes();
            let (code, arg) = (op & 0xf, op >> 4);
            let slots = match code {
                0 | 2 | 3 | 10 => 1,
                1 if arg == 0 => 2,
                1 if arg == 1 => 3,
                4 | 6 | 8 => 2,
                5 | 7 | 9 => 3,
                _ => 0,
            };
            if slots == 0 || i + slots > self.count {
                i = self.count;
                return Some((at, Op::Bad));
            }
            let short = || u32::from(self.slot(i + 1));
            let long = || short() | u32::from(self.slot(i + 2)) << 16;
            let decoded = match code {
                0 => Op::PushNonvol(arg),
                1 if arg == 0 => Op::Alloc(short() * 8),
                1 => Op::Alloc(long()),
                2 => Op::Alloc(u32::from(arg) * 8 + 8),
                3 => Op::SetFpReg,
                4 => Op::SaveNonvol(arg, short() * 8),
                5 => Op::SaveNonvol(arg, long()),
                // Version 1's long-retired SAVE_XMM(_FAR), version 2's EPILOG and SPARE.
                6..=9 => Op::NoEffect,
                10 if arg <= 1 => Op::MachineFrame(arg == 1),
                _ => Op::Bad,
            };
            i += slots;
            Some((at, decoded))
        })
    }
}
