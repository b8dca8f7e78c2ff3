//! Walking a whole stack: one unwinder per frame, bounded depth, and a reason for the end.

use crate::cfi::{CfiCache, SpaceUnwinder, StepError};
use crate::images::{space_of, ImageCache};
use crate::mem::{canonical, Memory};
use crate::x64::{UnwindCache, UnwindError};
use crate::{fp, Regs};

pub mod entry;

/// True for a lower-half (user) address.
fn canonical_lower(addr: u64) -> bool {
    addr < 0x0000_8000_0000_0000
}

/// How far a walk may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Most frames returned, the sampled PC included; 0 walks nothing.
    pub max_depth: usize,
    /// The guest is Linux: in kernel code, a frame-pointer chain may lead to the context an
    /// entry saved ([`entry`]), and the walk goes on in it: into the user-mode code a system
    /// call, exception or interrupt came from, or the kernel code an interrupt stopped.
    pub linux_entries: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_depth: 64,
            linux_entries: false,
        }
    }
}

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The outermost frame: a return address or frame pointer of zero.
    Complete,
    /// `max_depth` frames were taken.
    Depth,
    /// A stack slot, a header or unwind data was not readable at this address.
    Unreadable(u64),
    /// A return address was not canonical.
    NonCanonical(u64),
    /// The caller's frame was not above the callee's (a loop, or garbage).
    NotGrowing,
    /// An image's unwind info at this address was malformed.
    Malformed(u64),
    /// The vCPU ran 32-bit code (compatibility mode: a WOW64 process's x86 code), whose stack
    /// holds no x64 frames: the sampled PC alone.
    Compat,
}

/// A walked stack: the sampled PC, then each return address, innermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Program counters, innermost first.
    pub pcs: Vec<u64>,
    /// Why the walk stopped.
    pub end: End,
}

impl Stack {
    /// True if the walk stopped before the outermost frame.
    pub fn truncated(&self) -> bool {
        self.end != End::Complete
    }
}

/// What a walker keeps from one walk to the next: the PE images found and the unwind plans
/// decoded from them (each with its own invalidation rule: [`ImageCache`], [`UnwindCache`]),
/// and the CFI rules of the last address space walked with ELF files ([`CfiCache`]).
#[derive(Debug)]
pub struct WalkCache {
    /// The images found, per address space.
    pub images: ImageCache,
    /// Decoded unwind information, per image and PC.
    pub unwind: UnwindCache,
    /// Decoded call-frame information, per PC.
    pub cfi: CfiCache,
}

impl WalkCache {
    /// Empty caches; image scans look at most `scan_limit` bytes below a PC.
    pub fn new(scan_limit: u64) -> Self {
        WalkCache {
            images: ImageCache::new(scan_limit),
            unwind: UnwindCache::new(),
            cfi: CfiCache::default(),
        }
    }

    /// An image cache as [`WalkCache::new`]'s, but no unwind plans kept: every frame is
    /// unwound from the guest's bytes (the reference the plans are tested against).
    pub fn without_plans(scan_limit: u64) -> Self {
        WalkCache {
            images: ImageCache::new(scan_limit),
            unwind: UnwindCache::disabled(),
            cfi: CfiCache::default(),
        }
    }
}

/// Walks the stack of a vCPU whose registers are `regs`, in the address space `cr3`.
/// Generic over the memory, so a frame's stack reads compile to loads in the walk itself: a
/// walk right after a guest exit runs with the host's branch predictors and caches cold.
pub fn walk<M: Memory + ?Sized>(
    mem: &mut M,
    cache: &mut WalkCache,
    cr3: u64,
    regs: Regs,
    opts: Options,
) -> Stack {
    walk_with_files(mem, cache, cr3, regs, opts, None)
}

/// [`walk`], with the ELF files `files` maps in this address space: a frame in one of them is
/// unwound by its call-frame information ([`SpaceUnwinder::step`]) rather than by frame
/// pointers.
pub fn walk_with_files<M: Memory + ?Sized>(
    mem: &mut M,
    cache: &mut WalkCache,
    cr3: u64,
    mut regs: Regs,
    opts: Options,
    files: Option<&SpaceUnwinder>,
) -> Stack {
    let WalkCache {
        images,
        unwind,
        cfi,
    } = cache;
    let mut pcs = Vec::with_capacity(opts.max_depth.min(64));
    if opts.max_depth == 0 {
        return Stack {
            pcs,
            end: End::Complete,
        };
    }
    pcs.push(regs.rip);
    images.begin_walk();
    unwind.begin_walk();
    // The frame's PC is where its code stopped (the sampled one, or one an entry saved), not
    // a return address.
    let mut stopped = true;
    let end = loop {
        if pcs.len() >= opts.max_depth {
            break End::Depth;
        }
        let before = regs;
        // A return address follows its call: look up the call's function, not the next.
        let lookup = if stopped {
            regs.rip
        } else {
            regs.rip.wrapping_sub(1)
        };
        let was_stopped = std::mem::replace(&mut stopped, false);
        let in_file = files.filter(|f| f.covers(lookup));
        let stepped = match in_file {
            Some(f) => match f.step(mem, cfi, &mut regs, was_stopped) {
                Ok(true) => Ok(false),
                Ok(false) => break End::Complete,
                Err(StepError::Unreadable(at)) => break End::Unreadable(at),
                Err(StepError::NotGrowing) => break End::NotGrowing,
                Err(StepError::Malformed(at)) => break End::Malformed(at),
            },
            None => match images.find(mem, cr3, lookup) {
                Some(image) => unwind.unwind(mem, &image, space_of(cr3, lookup), lookup, &mut regs),
                None => {
                    let saved = (opts.linux_entries && !canonical_lower(lookup))
                        .then(|| entry::pt_regs_at(&regs))
                        .flatten()
                        .and_then(|at| entry::saved_regs(mem, at));
                    match saved {
                        Some(saved) => {
                            regs = saved;
                            stopped = true;
                            Ok(true)
                        }
                        None if regs.rbp() == 0 => break End::Complete,
                        None => fp::step(mem, &mut regs).map(|()| false).map_err(Into::into),
                    }
                }
            },
        };
        let stack_switched = match stepped {
            Ok(switched) => switched,
            Err(UnwindError::Unreadable(e)) => break End::Unreadable(e.0),
            Err(UnwindError::Malformed(at)) => break End::Malformed(at),
        };
        if regs.rip == 0 {
            break End::Complete;
        }
        if !canonical(regs.rip) {
            break End::NonCanonical(regs.rip);
        }
        if !stack_switched && regs.rsp() <= before.rsp() {
            break End::NotGrowing;
        }
        pcs.push(regs.rip);
    };
    Stack { pcs, end }
}

#[cfg(test)]
mod tests;
