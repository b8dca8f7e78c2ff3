//! Decoded unwind information, kept between walks: for each PC a walk unwinds from (the
//! sampled PC, or a return address), the plan [`unwind`](super::unwind) would follow there,
//! decoded once from the image's RUNTIME_FUNCTION, UNWIND_INFO (and chain) and code bytes.
//! Applying a plan reads only stack slots, in the order the uncached unwinder reads them.
//!
//! A plan is keyed by the address space, the PC and the lookup address, and holds the image it
//! was decoded from (place, size, build and directories, as [`Image`] reads them): a frame uses
//! it only if the image found for it this walk (headers re-read once per walk by
//! [`ImageCache`](crate::ImageCache)) is the same. A guest that rewrites its unwind data or
//! code in place, headers unchanged, is caught by age: a plan is decoded again on its first use
//! [`REDECODE_WALKS`] walks or more after it was decoded, so at most that many walks of the
//! same cache use the old plan (the staleness bound). A stale plan is only a wrong frame: its
//! steps are the same kinds of reads and register moves the guest's own unwind data could ask
//! for, each read bounded and checked, and the walk's bounds (depth, a growing stack) are the
//! walker's, outside the plan.
//!
//! What cannot be decoded into a plan (unreadable or malformed unwind data, a plan longer than
//! [`MAX_STEPS`]) is not kept: such a frame takes the uncached path every time, which ends the
//! walk with the same reason as before.

use super::epilog::Epilog;
use super::info::{Info, Op};
use super::{unwind, UnwindError, MAX_CHAIN};
use crate::mem::Memory;
use crate::pe::Image;
use crate::Regs;

/// Walks after which a plan is decoded again from the guest's bytes.
pub const REDECODE_WALKS: u64 = 64;
/// Plans kept (a direct-mapped table: a plan replaces the one in its slot).
const SLOTS: usize = 512;
/// The most steps a kept plan has; longer ones are not kept.
const MAX_STEPS: usize = 20;

/// One step of a plan: what one unwind code does to the registers, undone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// The frame base of this UNWIND_INFO (for saved registers) is RSP.
    BaseRsp,
    /// It is the frame register minus 16 times the frame offset.
    BaseFrame(u8, u8),
    /// PUSH_NONVOL: pop the register.
    Pop(u8),
    /// ALLOC_*: release this many bytes.
    Add(u32),
    /// SET_FPREG: RSP is the frame register minus 16 times the frame offset.
    SetRsp(u8, u8),
    /// SAVE_NONVOL(_FAR): load the register from the frame base plus this.
    Load(u8, u32),
    /// PUSH_MACHFRAME (true: with an error code).
    MachineFrame(bool),
    /// Pop the return address.
    Ret,
}

/// How one PC unwinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// The PC is in an epilogue: simulate the rest of it.
    Epilog(Epilog),
    /// Undo the prologue (all of it, or the part already run), chained infos included.
    Steps {
        steps: [Step; MAX_STEPS],
        len: u8,
        machine_frame: bool,
    },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    space: u64,
    rip: u64,
    lookup: u64,
    image: Image,
    /// The walk it was decoded in.
    decoded: u64,
    plan: Plan,
}

/// Plans decoded from the unwind data of the images a walker meets, over all address spaces.
#[derive(Debug)]
pub struct UnwindCache {
    /// Allocated on the first plan kept; empty for a cache that keeps none.
    entries: Vec<Option<Entry>>,
    slots: usize,
    walk: u64,
}

impl Default for UnwindCache {
    fn default() -> Self {
        Self::new()
    }
}

impl UnwindCache {
    /// An empty cache.
    pub fn new() -> Self {
        UnwindCache {
            entries: Vec::new(),
            slots: SLOTS,
            walk: 0,
        }
    }

    /// A cache that keeps nothing: every frame is unwound from the guest's bytes (the
    /// reference the kept plans are checked against).
    pub fn disabled() -> Self {
        UnwindCache {
            slots: 0,
            ..Self::new()
        }
    }

    /// Starts a walk (plans age by walks).
    pub fn begin_walk(&mut self) {
        self.walk += 1;
    }

    /// Unwinds one frame in `image` (found for this walk in the address space `space`) whose
    /// registers are `regs`: `lookup` is the address its function is looked up by (the PC, or
    /// a return address minus one). Returns whether RIP and RSP came from a machine frame.
    /// The result is the uncached unwinder's, from the guest's bytes as last decoded.
    pub fn unwind<M: Memory + ?Sized>(
        &mut self,
        mem: &mut M,
        image: &Image,
        space: u64,
        lookup: u64,
        regs: &mut Regs,
    ) -> Result<bool, UnwindError> {
        if self.slots == 0 {
            return uncached(&mut &mut *mem, image, lookup, regs);
        }
        let slot = self.slot(space, regs.rip);
        if let Some(Some(e)) = self.entries.get(slot) {
            if (e.space, e.rip, e.lookup) == (space, regs.rip, lookup)
                && e.image == *image
                && self.walk - e.decoded < REDECODE_WALKS
            {
                return e.plan.run(mem, regs);
            }
        }
        self.decode_and_unwind(&mut &mut *mem, image, space, lookup, regs)
    }

    /// Decodes the plan for this frame, keeps it and applies it; or unwinds uncached.
    #[cold]
    #[inline(never)]
    fn decode_and_unwind(
        &mut self,
        mem: &mut dyn Memory,
        image: &Image,
        space: u64,
        lookup: u64,
        regs: &mut Regs,
    ) -> Result<bool, UnwindError> {
        let Some(plan) = decode(mem, image, lookup, regs.rip) else {
            return uncached(mem, image, lookup, regs);
        };
        let slot = self.slot(space, regs.rip);
        if self.entries.is_empty() {
            self.entries = vec![None; self.slots];
        }
        self.entries[slot] = Some(Entry {
            space,
            rip: regs.rip,
            lookup,
            image: *image,
            decoded: self.walk,
            plan,
        });
        plan.run(mem, regs)
    }

    fn slot(&self, space: u64, rip: u64) -> usize {
        let h = (rip ^ space.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The top bits of the product; `slots` is a power of two.
        usize::try_from(h >> 40).unwrap_or(0) & (self.slots - 1)
    }
}

/// The uncached unwinder: the RUNTIME_FUNCTION covering `lookup`, its unwind info applied; a
/// PC without one is a leaf, its return address at RSP.
fn uncached(
    mem: &mut dyn Memory,
    image: &Image,
    lookup: u64,
    regs: &mut Regs,
) -> Result<bool, UnwindError> {
    match image.function(mem, lookup)? {
        Some(f) => unwind(mem, image, f, regs).map(|u| u.machine_frame),
        None => Plan::leaf().run(mem, regs),
    }
}

/// The plan for a frame at `rip` whose function is looked up by `lookup`, or None where the
/// uncached unwinder would fail on the unwind data or the plan would be too long.
fn decode(mem: &mut dyn Memory, image: &Image, lookup: u64, rip: u64) -> Option<Plan> {
    let Some(f) = image.function(mem, lookup).ok()? else {
        return Some(Plan::leaf());
    };
    let begin = image.base + u64::from(f.begin);
    let mut info = Info::read(mem, image, f.unwind).ok()?;
    let offset = rip.wrapping_sub(begin);
    if offset >= u64::from(info.prolog_size) {
        let end = image.base + u64::from(f.end);
        if let Some(e) = Epilog::parse(mem, rip, info.frame_reg, begin..end).ok()? {
            return Some(Plan::Epilog(e));
        }
    }
    let mut plan = Builder::default();
    let mut prolog_offset = Some(offset);
    for _ in 0..MAX_CHAIN {
        plan.level(&info, prolog_offset)?;
        let Some(parent) = info.chained else {
            if !plan.machine_frame {
                plan.push(Step::Ret)?;
            }
            return Some(Plan::Steps {
                steps: plan.steps,
                len: plan.len,
                machine_frame: plan.machine_frame,
            });
        };
        info = Info::read(mem, image, parent.unwind).ok()?;
        prolog_offset = None;
    }
    None
}

/// A plan of steps being decoded.
struct Builder {
    steps: [Step; MAX_STEPS],
    len: u8,
    machine_frame: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            steps: [Step::Ret; MAX_STEPS],
            len: 0,
            machine_frame: false,
        }
    }
}

impl Builder {
    fn push(&mut self, step: Step) -> Option<()> {
        *self.steps.get_mut(usize::from(self.len))? = step;
        self.len += 1;
        Some(())
    }

    /// The steps of one UNWIND_INFO, as `Info::apply` would take them (with `prolog_offset`,
    /// only those of prologue instructions ending at or before it); None where it would fail.
    fn level(&mut self, info: &Info, prolog_offset: Option<u64>) -> Option<()> {
        let done = |at: u8| prolog_offset.is_none_or(|o| u64::from(at) <= o);
        let fp = info.frame_reg;
        if info
            .ops()
            .any(|(at, op)| matches!(op, Op::SaveNonvol(..)) && done(at))
        {
            let frame = fp != 0 && info.ops().any(|(at, op)| op == Op::SetFpReg && done(at));
            self.push(if frame {
                Step::BaseFrame(fp, info.frame_offset)
            } else {
                Step::BaseRsp
            })?;
        }
        for (at, op) in info.ops() {
            if op == Op::Bad {
                return None;
            }
            if !done(at) {
                continue;
            }
            let step = match op {
                Op::PushNonvol(r) => Step::Pop(r),
                Op::Alloc(size) => Step::Add(size),
                Op::SetFpReg if fp == 0 => return None,
                Op::SetFpReg => Step::SetRsp(fp, info.frame_offset),
                Op::SaveNonvol(r, off) => Step::Load(r, off),
                Op::MachineFrame(error_code) => {
                    self.machine_frame = true;
                    Step::MachineFrame(error_code)
                }
                Op::NoEffect | Op::Bad => continue,
            };
            self.push(step)?;
        }
        Some(())
    }
}

impl Plan {
    /// A function without unwind data: it moved nothing, the return address is at RSP.
    fn leaf() -> Plan {
        Plan::Steps {
            steps: [Step::Ret; MAX_STEPS],
            len: 1,
            machine_frame: false,
        }
    }

    /// Applies the plan to `regs`, reading stack slots through `mem`.
    fn run<M: Memory + ?Sized>(&self, mem: &mut M, regs: &mut Regs) -> Result<bool, UnwindError> {
        let (steps, machine_frame) = match self {
            Plan::Epilog(e) => {
                e.apply(mem, regs)?;
                return Ok(false);
            }
            Plan::Steps {
                steps,
                len,
                machine_frame,
            } => (&steps[..usize::from(*len)], *machine_frame),
        };
        let frame = |regs: &Regs, r: u8, off: u8| {
            regs.gpr[usize::from(r)].wrapping_sub(16 * u64::from(off))
        };
        let mut base = regs.rsp();
        for step in steps {
            let rsp = regs.rsp();
            match *step {
                Step::BaseRsp => base = rsp,
                Step::BaseFrame(r, off) => base = frame(regs, r, off),
                Step::Pop(r) => {
                    regs.gpr[usize::from(r)] = mem.read_u64(rsp)?;
                    regs.gpr[Regs::RSP] = regs.rsp().wrapping_add(8);
                }
                Step::Add(size) => regs.gpr[Regs::RSP] = rsp.wrapping_add(u64::from(size)),
                Step::SetRsp(r, off) => regs.gpr[Regs::RSP] = frame(regs, r, off),
                Step::Load(r, off) => {
                    regs.gpr[usize::from(r)] = mem.read_u64(base.wrapping_add(u64::from(off)))?;
                }
                Step::MachineFrame(error_code) => {
                    let at = rsp.wrapping_add(if error_code { 8 } else { 0 });
                    regs.rip = mem.read_u64(at)?;
                    regs.gpr[Regs::RSP] = mem.read_u64(at.wrapping_add(24))?;
                }
                Step::Ret => {
                    regs.rip = mem.read_u64(rsp)?;
                    regs.gpr[Regs::RSP] = rsp.wrapping_add(8);
                }
            }
        }
        Ok(machine_frame)
    }
}

#[cfg(test)]
mod tests;
