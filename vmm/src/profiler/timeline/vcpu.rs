//! One vCPU's share of the timeline: its samples, the call stacks they use (interned: a stack
//! seen before costs a hash lookup, no allocation), its markers and its drops.

use std::collections::HashMap;

use report::timeline::Marker;

use super::MAX_STACK_FRAMES;

/// No guest thread (rows are below `u32::MAX`: the process table has far fewer).
const NO_THREAD: u32 = u32::MAX;

/// One recorded sample (24 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Recorded {
    pub(super) t_ns: u64,
    /// The host profile it counted in.
    pub(super) profile: u32,
    /// Index into the vCPU's stack table.
    pub(super) stack: u32,
    thread: u32,
    pub(super) cpl: u8,
}

impl Recorded {
    pub(super) fn thread(&self) -> Option<u32> {
        (self.thread != NO_THREAD).then_some(self.thread)
    }
}

/// What one vCPU recorded.
#[derive(Default)]
pub(super) struct VcpuLog {
    pub(super) samples: Vec<Recorded>,
    stacks: Vec<Box<[u64]>>,
    by_stack: HashMap<Box<[u64]>, u32>,
    frames: usize,
    pub(super) markers: Vec<Marker>,
    /// Samples dropped past the run's cap, per host profile.
    dropped: Vec<(u32, u64)>,
}

impl VcpuLog {
    /// Records a sample of host profile `profile` whose stack is `pcs`.
    pub(super) fn sample(
        &mut self,
        profile: u32,
        t_ns: u64,
        cpl: u8,
        thread: Option<u32>,
        pcs: &[u64],
    ) {
        let stack = match self.intern(pcs) {
            Some(s) => s,
            // The table is full: the PC alone (itself a stack that may be known already).
            None => match pcs.first().and_then(|pc| self.intern(&[*pc])) {
                Some(s) => s,
                None => return self.drop_sample(profile),
            },
        };
        self.samples.push(Recorded {
            t_ns,
            profile,
            stack,
            thread: thread.unwrap_or(NO_THREAD),
            cpl,
        });
    }

    /// The index of stack `pcs`, added if new and within [`MAX_STACK_FRAMES`].
    fn intern(&mut self, pcs: &[u64]) -> Option<u32> {
        if let Some(&i) = self.by_stack.get(pcs) {
            return Some(i);
        }
        if self.frames + pcs.len() > MAX_STACK_FRAMES {
            return None;
        }
        let i = u32::try_from(self.stacks.len()).ok()?;
        self.frames += pcs.len();
        self.stacks.push(pcs.into());
        self.by_stack.insert(pcs.into(), i);
        Some(i)
    }

    /// Stack `i` (empty if there is none).
    pub(super) fn stack(&self, i: u32) -> &[u64] {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.stacks.get(i))
            .map_or(&[], |s| s)
    }

    /// Counts a sample of `profile` not kept.
    pub(super) fn drop_sample(&mut self, profile: u32) {
        match self.dropped.iter_mut().find(|(p, _)| *p == profile) {
            Some((_, n)) => *n += 1,
            None => self.dropped.push((profile, 1)),
        }
    }

    /// Samples of `profile` not kept.
    pub(super) fn dropped(&self, profile: u32) -> u64 {
        self.dropped
            .iter()
            .find(|(p, _)| *p == profile)
            .map_or(0, |(_, n)| *n)
    }
}
