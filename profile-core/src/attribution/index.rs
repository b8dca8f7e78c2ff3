//! The attribution index: one table of started objects for each profiled process and one for
//! global objects, each with a [`Stab`] over its objects' ranges.
//!
//! A sample looks up its process's table (one hash probe in a [`ProcMap`]) and the global
//! table; each stabbing query yields exactly the objects whose range holds the PC, in
//! O(log n + hits) for n objects in that table. Keying the tables by process means a sample
//! never sees another process's objects, however many there are.
//!
//! Each object's record, the fields a sample needs copied out of its configuration beside the
//! VMM's pin token, lives in its table, so a hit reads one record.
//!
//! A start or stop rebuilds the one table it changes: O(n log n) in that table's size. Starts
//! and stops are hypercalls, far rarer than samples, so the lookup gets the simple static
//! structure; [`Stab`]'s Tree layout keeps memory O(n log n) whatever ranges a guest picks.

use alloc::vec::Vec;

use super::procmap::ProcMap;
use super::stab::Stab;
use crate::handle::ObjectId;
use crate::object::ObjectConfig;
use crate::source::ProfileSource;

/// What a sample needs of a started object.
#[derive(Clone, Debug)]
pub(crate) struct Rec<P> {
    pub(crate) base: u64,
    pub(crate) end: u64,
    /// Affinity for vCPUs 0..64.
    pub(crate) group0: u64,
    /// Bytes of the buffer counters can use (defensive bound for the offset).
    pub(crate) counters_len: u64,
    pub(crate) id: ObjectId,
    /// The object's slot in the manager (for the full affinity, and to find the record on
    /// stop).
    pub(crate) slot: u32,
    /// The VMM's pin token (the object's only copy while started).
    pub(crate) pin: P,
    pub(crate) source: ProfileSource,
    /// `BucketSize`.
    pub(crate) shift: u8,
    /// The affinity has processors beyond group 0.
    pub(crate) higher_groups: bool,
}

/// The started objects of one process, or the global ones.
#[derive(Clone, Debug)]
struct Table<P> {
    /// In no particular order; the stabbing structure names them by position.
    recs: Vec<Rec<P>>,
    stab: Stab,
}

impl<P> Default for Table<P> {
    fn default() -> Self {
        Table {
            recs: Vec::new(),
            stab: Stab::default(),
        }
    }
}

impl<P> Table<P> {
    fn rebuild(&mut self) {
        let ranges: Vec<(u64, u64)> = self.recs.iter().map(|r| (r.base, r.end)).collect();
        self.stab = Stab::build(&ranges);
    }

    /// Calls `f` for each record whose range holds `pc`.
    #[inline]
    fn query<F: FnMut(&Rec<P>)>(&self, pc: u64, mut f: F) {
        self.stab.query(pc, |i| {
            if let Some(r) = self.recs.get(i as usize) {
                f(r);
            }
        });
    }
}

/// The global table and one table per process key.
#[derive(Clone, Debug)]
pub(crate) struct Index<P> {
    global: Table<P>,
    procs: ProcMap<Table<P>>,
    started: usize,
}

impl<P> Default for Index<P> {
    fn default() -> Self {
        Index {
            global: Table::default(),
            procs: ProcMap::default(),
            started: 0,
        }
    }
}

impl<P> Index<P> {
    /// Calls `f` for every started object whose range holds `pc` and which is global or
    /// profiles `process`, each once, in no particular order. The caller checks source and
    /// affinity.
    #[inline]
    pub(crate) fn candidates<F: FnMut(&Rec<P>)>(&self, pc: u64, process: Option<u64>, mut f: F) {
        if let Some(table) = process.and_then(|key| self.procs.get(key)) {
            table.query(pc, &mut f);
        }
        self.global.query(pc, f);
    }

    /// Every started object's record: the global ones, then each process's.
    pub(crate) fn records(&self) -> impl Iterator<Item = &Rec<P>> {
        self.global
            .recs
            .iter()
            .chain(self.procs.values().flat_map(|t| t.recs.iter()))
    }

    /// Started objects.
    pub(crate) fn len(&self) -> usize {
        self.started
    }

    /// Makes the object in manager slot `slot` visible to lookups.
    pub(crate) fn insert(&mut self, slot: u32, id: ObjectId, config: &ObjectConfig, pin: P) {
        let record = Rec {
            base: config.base,
            end: config.end(),
            group0: config.affinity.group0(),
            counters_len: config.counters_len(),
            id,
            slot,
            pin,
            source: config.source,
            // BucketSize is 2..=31 once validated.
            shift: u8::try_from(config.bucket_size).unwrap_or(u8::MAX),
            higher_groups: config.affinity.has_higher_groups(),
        };
        let table = match config.process {
            None => &mut self.global,
            Some(key) => self.procs.get_or_insert_with(key, Table::default),
        };
        table.recs.push(record);
        table.rebuild();
        self.started += 1;
    }

    /// Removes the object `id` in `slot`, started for `process`; returns its pin token.
    pub(crate) fn remove(&mut self, slot: u32, id: ObjectId, process: Option<u64>) -> Option<P> {
        let table = match process {
            None => &mut self.global,
            Some(key) => self.procs.get_mut(key)?,
        };
        let at = table
            .recs
            .iter()
            .position(|r| r.slot == slot && r.id == id)?;
        let record = table.recs.swap_remove(at);
        table.rebuild();
        if let (Some(key), true) = (process, table.recs.is_empty()) {
            // A process whose objects are all stopped costs nothing to later samples.
            self.procs.remove(key);
        }
        self.started -= 1;
        Some(record.pin)
    }
}
