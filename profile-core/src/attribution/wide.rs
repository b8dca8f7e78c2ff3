//! The fallback for "wide" objects, whose range spans more than [`super::index::MAX_SPAN`]
//! chunks: a [`Stab`] over their ranges, one per table (global, or one process). Rebuilt on each
//! change to the table, which only wide objects cause; lookups consult it only when the class
//! has wide objects at all.

use alloc::vec::Vec;

use super::stab::{Layout, Stab};

/// The wide objects of one table, as indices into the index's records.
#[derive(Clone, Debug, Default)]
pub(crate) struct WideTable {
    ids: Vec<u32>,
    stab: Stab,
}

impl WideTable {
    /// Adds `id` (then call [`WideTable::rebuild`]).
    pub(crate) fn insert(&mut self, id: u32) {
        self.ids.push(id);
    }

    /// Removes `id` (then call [`WideTable::rebuild`]); false if absent.
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        match self.ids.iter().position(|&m| m == id) {
            Some(at) => {
                self.ids.swap_remove(at);
                true
            }
            None => false,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Rebuilds the stabbing structure; `range(id)` gives each member's `[base, end)`.
    pub(crate) fn rebuild<R: Fn(u32) -> (u64, u64)>(&mut self, range: R, layout: Layout) {
        let ranges: Vec<(u64, u64)> = self.ids.iter().map(|&id| range(id)).collect();
        self.stab = Stab::build(&ranges, layout);
    }

    /// Calls `f` with the id of every member whose range holds `pc`.
    #[inline]
    pub(crate) fn query<F: FnMut(u32)>(&self, pc: u64, mut f: F) {
        self.stab.query(pc, |i| {
            if let Some(&id) = self.ids.get(i as usize) {
                f(id);
            }
        });
    }
}
