//! The index of started objects, the object manager's own data structure: one table of started
//! objects for each profiled process and one for global objects, each with a [`Stab`] over its
//! objects' ranges. [`super::ObjectManager::record`] asks it for the candidates of a sample.
//!
//! A sample looks up its process's table (one hash probe in a [`ProcMap`]) and the global
//! table; each stabbing query yields exactly the objects whose range holds the PC, in
//! O(log n + hits) for n objects in that table. Keying the tables by process means a sample
//! never sees another process's objects, however many there are.
//!
//! Each object's record, the fields a sample needs copied out of its configuration beside the
//! VMM's pin token, lives in its table, so a hit reads one record.
//!
//! Starts and stops are rarer than samples, but a guest may start thousands of objects in one
//! table (the refguest's `objects` scenario starts 8192 per vCPU over one range), so a table is
//! not rebuilt on every change: up to [`SLACK`] new objects wait in a short list that lookups
//! scan, and up to as many stopped ones stay behind as empty places the lookup skips. The
//! change after that rebuilds the table, O(n log n): amortized O((n log n) / SLACK) per start
//! or stop instead of O(n log n). [`Stab`]'s Tree layout keeps memory O(n log n) whatever
//! ranges a guest picks.

mod procmap;
mod stab;

use alloc::vec::Vec;

use self::procmap::ProcMap;
use self::stab::Stab;
use super::ObjectConfig;
use crate::handle::ObjectId;
use crate::source::ProfileSource;

/// Starts and stops a table takes before it rebuilds its stabbing structure: bounds both the
/// records a lookup scans outside it and the empty places it skips.
const SLACK: usize = 32;

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
    /// The object's slot in the manager (for the full affinity).
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
    /// `None` where an object stopped since the last rebuild.
    recs: Vec<Option<Rec<P>>>,
    /// Over `recs[..built]`; the records after those are scanned.
    stab: Stab,
    built: usize,
    /// Starts and stops since the last rebuild.
    changes: usize,
    /// Records that are not `None`.
    live: usize,
}

impl<P> Default for Table<P> {
    fn default() -> Self {
        Table {
            recs: Vec::new(),
            stab: Stab::default(),
            built: 0,
            changes: 0,
            live: 0,
        }
    }
}

impl<P> Table<P> {
    /// Calls `f` for each record whose range holds `pc`.
    #[inline]
    fn query<F: FnMut(&Rec<P>)>(&self, pc: u64, mut f: F) {
        self.stab.query(pc, |i| {
            if let Some(Some(r)) = self.recs.get(i as usize) {
                f(r);
            }
        });
        for r in self.recs[self.built..].iter().flatten() {
            if r.base <= pc && pc < r.end {
                f(r);
            }
        }
    }

    /// Counts a start or stop; past [`SLACK`] of them, drops the empty places and rebuilds
    /// the stabbing structure over every record, noting each one's new place in `places`.
    fn changed(&mut self, places: &mut [u32]) {
        self.changes += 1;
        if self.changes <= SLACK {
            return;
        }
        self.recs.retain(Option::is_some);
        let mut ranges = Vec::with_capacity(self.recs.len());
        for (at, r) in (0u32..).zip(self.recs.iter().flatten()) {
            places[r.slot as usize] = at;
            ranges.push((r.base, r.end));
        }
        self.stab = Stab::build(&ranges);
        self.built = self.recs.len();
        self.changes = 0;
    }
}

/// The global table and one table per process key.
#[derive(Clone, Debug)]
pub(crate) struct Index<P> {
    global: Table<P>,
    procs: ProcMap<Table<P>>,
    /// By manager slot: the started object's place in its table's records.
    places: Vec<u32>,
    started: usize,
}

impl<P> Default for Index<P> {
    fn default() -> Self {
        Index {
            global: Table::default(),
            procs: ProcMap::default(),
            places: Vec::new(),
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
            .flatten()
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
        if self.places.len() <= slot as usize {
            self.places.resize(slot as usize + 1, 0);
        }
        // Fewer than 2^32 objects can be started (8192 x at most 2048 processors).
        self.places[slot as usize] = u32::try_from(table.recs.len()).unwrap_or(u32::MAX);
        table.recs.push(Some(record));
        table.live += 1;
        table.changed(&mut self.places);
        self.started += 1;
    }

    /// Removes the object `id` in `slot`, started for `process`; returns its pin token.
    pub(crate) fn remove(&mut self, slot: u32, id: ObjectId, process: Option<u64>) -> Option<P> {
        let table = match process {
            None => &mut self.global,
            Some(key) => self.procs.get_mut(key)?,
        };
        let place = table
            .recs
            .get_mut(*self.places.get(slot as usize)? as usize)?;
        if !matches!(place, Some(r) if r.slot == slot && r.id == id) {
            return None;
        }
        let record = place.take()?;
        table.live -= 1;
        table.changed(&mut self.places);
        if let (Some(key), 0) = (process, table.live) {
            // A process whose objects are all stopped costs its samples no lookup.
            self.procs.remove(key);
        }
        self.started -= 1;
        Some(record.pin)
    }
}
