//! The attribution index: one table for global objects and one per profiled process, each a
//! [`Stab`] over the started objects' ranges. Rebuilt (only the affected table) on start/stop.

use alloc::vec::Vec;

use super::procmap::ProcMap;
use super::stab::{Layout, Stab};
use crate::handle::ObjectId;
use crate::object::ObjectConfig;
use crate::source::ProfileSource;

/// What a sample needs of a started object, copied out of its configuration so the hot path
/// reads one cache line.
#[derive(Clone, Debug)]
pub(crate) struct Entry<P> {
    pub(crate) base: u64,
    pub(crate) end: u64,
    /// Affinity for vCPUs 0..64.
    pub(crate) group0: u64,
    /// Bytes of the buffer counters can use (defensive bound for the offset).
    pub(crate) counters_len: u64,
    pub(crate) id: ObjectId,
    pub(crate) source: ProfileSource,
    pub(crate) shift: u32,
    /// Slot in the manager (for the pin token and the full affinity).
    pub(crate) slot: u32,
    /// The affinity has processors beyond group 0.
    pub(crate) higher_groups: bool,
    /// The VMM's pin token, kept beside the hot fields (the object's only copy).
    pub(crate) pin: P,
}

/// The started objects of one process (or the global ones).
#[derive(Clone, Debug)]
pub(crate) struct Table<P> {
    pub(crate) entries: Vec<Entry<P>>,
    pub(crate) stab: Stab,
}

impl<P> Default for Table<P> {
    fn default() -> Self {
        Table {
            entries: Vec::new(),
            stab: Stab::default(),
        }
    }
}

impl<P> Table<P> {
    fn rebuild(&mut self, layout: Layout) {
        let ranges: Vec<(u64, u64)> = self.entries.iter().map(|e| (e.base, e.end)).collect();
        self.stab = Stab::build(&ranges, layout);
    }

    /// Calls `f` for each entry whose range holds `pc`.
    #[inline]
    pub(crate) fn query<F: FnMut(&Entry<P>)>(&self, pc: u64, mut f: F) {
        self.stab.query(pc, |i| {
            if let Some(e) = self.entries.get(i as usize) {
                f(e);
            }
        });
    }
}

/// Global table plus per-process tables.
#[derive(Clone, Debug)]
pub(crate) struct Index<P> {
    pub(crate) global: Table<P>,
    pub(crate) procs: ProcMap<Table<P>>,
    layout: Layout,
}

impl<P> Default for Index<P> {
    fn default() -> Self {
        Index {
            global: Table::default(),
            procs: ProcMap::default(),
            layout: Layout::Auto,
        }
    }
}

impl<P> Index<P> {
    /// Forces a layout for every table (tests and benchmarks).
    pub(crate) fn set_layout(&mut self, layout: Layout) {
        self.layout = layout;
        self.global.rebuild(layout);
        // Per-process tables are rebuilt lazily on their next change; tests set the layout
        // before starting objects.
    }

    pub(crate) fn insert(&mut self, slot: u32, id: ObjectId, config: &ObjectConfig, pin: P) {
        let entry = Entry {
            base: config.base,
            end: config.end(),
            group0: config.affinity.group0(),
            counters_len: config.counters_len(),
            id,
            source: config.source,
            shift: config.bucket_size,
            slot,
            higher_groups: config.affinity.has_higher_groups(),
            pin,
        };
        let layout = self.layout;
        let table = match config.process {
            None => &mut self.global,
            Some(key) => self.procs.get_or_insert_with(key, Table::default),
        };
        table.entries.push(entry);
        table.rebuild(layout);
    }

    /// Removes the object's entry; returns its pin token.
    pub(crate) fn remove(&mut self, id: ObjectId, process: Option<u64>) -> Option<P> {
        let layout = self.layout;
        let table = match process {
            None => &mut self.global,
            Some(key) => self.procs.get_mut(key)?,
        };
        let at = table.entries.iter().position(|e| e.id == id)?;
        let entry = table.entries.remove(at);
        table.rebuild(layout);
        if let (Some(key), true) = (process, table.entries.is_empty()) {
            self.procs.remove(key);
        }
        Some(entry.pin)
    }

    /// Every table: the global one first, then one per process.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &Table<P>> {
        core::iter::once(&self.global).chain(self.procs.values())
    }
}
