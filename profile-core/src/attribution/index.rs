//! The attribution index: which started objects may hold a PC, in time independent of how many
//! objects are started.
//!
//! * **Records.** Each started object's sample-time fields and pin token, copied out of its
//!   configuration into one 64-byte-aligned record, indexed by the object's slot in the
//!   manager (stable while it is open).
//! * **Chunks.** The address space is cut into chunks of `2^shift` bytes. An object whose range
//!   spans at most [`MAX_SPAN`] chunks is listed under each chunk it overlaps, in a hash map
//!   keyed by (process key, chunk number) for per-process objects and by chunk number alone for
//!   global ones ([`ChunkMap`]). A lookup is one probe per map: hash, one cache line, then the
//!   record of the one listed object that can hold the PC (of two disjoint members, the slot's
//!   split point picks it; two overlapping ones are both read). A chunk with three or more
//!   members (nested or packed objects) keeps a stabbing structure over them, so a lookup there
//!   yields only the members whose range holds the PC.
//! * **Class bounds.** Each class keeps a range covering all its objects (widened on start,
//!   recomputed on re-index); a lookup skips a class whose bounds exclude the PC. With kernel
//!   objects global and user objects per process, as Windows profilers use them, a sample
//!   probes one map, not two.
//! * **Wide objects**, which span more chunks, go to a per-table [`WideTable`] (the stabbing
//!   structure), consulted only while some exist.
//! * **Adaptive chunk size.** Each class (global, per-process) picks its own shift: the smallest
//!   in [`MIN_CHUNK_SHIFT`]..=[`MAX_CHUNK_SHIFT`] whose cost, the sum over its objects of the
//!   chunks each spans (or [`WIDE_COST`] for a wide one), stays within [`BUDGET_PER_OBJECT`] x
//!   objects + [`BUDGET_SLACK`]. Memory is therefore O(objects) whatever the ranges, chunks are
//!   as fine as that allows (fewer objects share a chunk), and an object goes wide only when
//!   making it fit would coarsen the chunks of many others (a lone object never does). The cost at every shift is kept up to date on
//!   each start and stop (58 additions); a class is rebuilt under its ideal shift when that
//!   differs from the current one and either a quarter of its objects changed since the last
//!   rebuild (amortized O(1) per start/stop) or its cost exceeds twice the budget.
//!
//! Start and stop otherwise update only the chunks of the object concerned (at most
//! [`MAX_SPAN`] hash inserts or removals), or rebuild its table's wide structure if it is wide.

use alloc::vec::Vec;

use super::chunkmap::{ChunkMap, Member, Members};
use super::procmap::ProcMap;
use super::stab::Layout;
use super::wide::WideTable;
use crate::handle::ObjectId;
use crate::object::ObjectConfig;
use crate::source::ProfileSource;

/// Finest chunk: 64 bytes.
pub const MIN_CHUNK_SHIFT: u32 = 6;
/// Coarsest chunk: half the address space.
pub const MAX_CHUNK_SHIFT: u32 = 63;
/// An object spanning more chunks than this is "wide" (see [`WideTable`]).
pub const MAX_SPAN: u64 = 64;
/// Memberships per object the adaptive shift aims for (see the module documentation).
pub const BUDGET_PER_OBJECT: u64 = 4;
/// Memberships allowed on top, so small tables get fine chunks.
pub const BUDGET_SLACK: u64 = 64;
/// What a wide object counts against the budget: more than the slack, so that one object
/// alone never goes wide.
pub const WIDE_COST: u64 = 2 * MAX_SPAN;

const SHIFTS: usize = (MAX_CHUNK_SHIFT - MIN_CHUNK_SHIFT + 1) as usize;
const INITIAL_SHIFT: u32 = 16;

/// Chunks of `2^shift` bytes that `[base, end)` overlaps.
#[inline]
pub(crate) fn span(base: u64, end: u64, shift: u32) -> u64 {
    if base >= end {
        0
    } else {
        ((end - 1) >> shift) - (base >> shift) + 1
    }
}

/// What `[base, end)` counts against the budget at `shift`.
fn cost(base: u64, end: u64, shift: u32) -> u64 {
    match span(base, end, shift) {
        n if n <= MAX_SPAN => n,
        _ => WIDE_COST,
    }
}

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
    /// The process key; unused (0) for a global object.
    process_key: u64,
    /// The VMM's pin token (the object's only copy while started).
    pub(crate) pin: P,
    pub(crate) source: ProfileSource,
    /// `BucketSize`.
    pub(crate) shift: u8,
    /// The affinity has processors beyond group 0.
    pub(crate) higher_groups: bool,
    global: bool,
}

/// A cache-line-aligned cell, so that a record never straddles two lines.
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct Line<T>(pub(crate) T);

type Records<P> = Vec<Line<Option<Rec<P>>>>;

#[inline]
fn rec<P>(records: &Records<P>, id: u32) -> Option<&Rec<P>> {
    records.get(id as usize).and_then(|l| l.0.as_ref())
}

/// What the chunk map needs of record `id` (an empty range if there is none).
fn member<P>(records: &Records<P>, id: u32) -> Member {
    let (base, end, key) = rec(records, id).map_or((0, 0, 0), |r| (r.base, r.end, r.process_key));
    Member { base, end, key }
}

fn range_of<P>(records: &Records<P>, id: u32) -> (u64, u64) {
    let m = member(records, id);
    (m.base, m.end)
}

/// The chunk map and shift policy of one class of objects (global, or per-process).
#[derive(Clone, Debug)]
struct Class {
    /// The class's chunk map; its chunk size is the class's.
    map: ChunkMap,
    /// `cost[s - MIN_CHUNK_SHIFT]`: sum over indexed objects of `cost(.., s)`.
    cost: [u64; SHIFTS],
    /// Indexed objects (started, non-empty range).
    objects: u64,
    /// Starts and stops since the last rebuild.
    changes: u64,
    /// Objects in the wide tables.
    wide: usize,
    /// `[lo, lo + span)` holds every indexed object's range (a superset: widened on insert,
    /// recomputed on rebuild); a lookup skips the class when `pc` is outside. Empty: span 0.
    lo: u64,
    span: u64,
}

impl Default for Class {
    fn default() -> Self {
        Class {
            map: ChunkMap::with_capacity(0, INITIAL_SHIFT),
            cost: [0; SHIFTS],
            objects: 0,
            changes: 0,
            wide: 0,
            lo: 0,
            span: 0,
        }
    }
}

impl Class {
    /// True if `pc` may hold an object of this class.
    #[inline(always)]
    fn covers(&self, pc: u64) -> bool {
        pc.wrapping_sub(self.lo) < self.span
    }

    /// Widens the bounds to `[base, end)` (non-empty).
    fn widen(&mut self, base: u64, end: u64) {
        let (lo, hi) = if self.span == 0 {
            (base, end)
        } else {
            (self.lo.min(base), (self.lo + self.span).max(end))
        };
        self.lo = lo;
        self.span = hi - lo;
    }

    fn account(&mut self, base: u64, end: u64, add: bool) {
        for (s, c) in (MIN_CHUNK_SHIFT..).zip(self.cost.iter_mut()) {
            let n = cost(base, end, s);
            *c = if add { *c + n } else { *c - n };
        }
        if add {
            self.objects += 1;
        } else {
            self.objects -= 1;
        }
        self.changes += 1;
    }

    /// The chunk size, log2 bytes.
    fn shift(&self) -> u32 {
        self.map.chunk_shift()
    }

    fn cost_at(&self, shift: u32) -> u64 {
        self.cost[(shift - MIN_CHUNK_SHIFT) as usize]
    }

    fn budget(&self) -> u64 {
        BUDGET_PER_OBJECT * self.objects + BUDGET_SLACK
    }

    /// The smallest shift within budget (MAX_CHUNK_SHIFT always is: any range spans <= 2).
    fn ideal(&self) -> u32 {
        let budget = self.budget();
        (MIN_CHUNK_SHIFT..)
            .zip(self.cost.iter())
            .find(|&(_, &c)| c <= budget)
            .map_or(MAX_CHUNK_SHIFT, |(s, _)| s)
    }

    fn wants_rebuild(&self) -> bool {
        if self.ideal() == self.shift() {
            return false;
        }
        let empty = self.map.members() == 0 && self.wide == 0;
        empty
            || self.changes * 4 >= self.objects + 64
            || self.cost_at(self.shift()) > 2 * self.budget()
    }
}

/// The class that lists record `r` (of `global` and `procs`) and the first word of its keys
/// there: 0 for a global object, its process key otherwise.
fn class_of<'a, P>(
    r: &Rec<P>,
    global: &'a mut Class,
    procs: &'a mut Class,
) -> (&'a mut Class, u64) {
    if r.global {
        (global, 0)
    } else {
        (procs, r.process_key)
    }
}

/// Shape of the attribution index, for tests, benchmarks and diagnostics.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct IndexStats {
    /// Started objects.
    pub started: usize,
    /// Chunk size (log2 bytes) of global objects.
    pub global_chunk_shift: u32,
    /// Chunk size (log2 bytes) of per-process objects.
    pub process_chunk_shift: u32,
    /// Objects in the wide fallback.
    pub wide: usize,
    /// Distinct (process, chunk) keys.
    pub keys: usize,
    /// (key, object) memberships.
    pub memberships: usize,
    /// Bytes of records and hash slots (wide tables not counted).
    pub bytes: usize,
}

/// Records, the two chunk maps and the wide tables.
#[derive(Clone, Debug)]
pub(crate) struct Index<P> {
    records: Records<P>,
    started: usize,
    global: Class,
    global_wide: WideTable,
    procs: Class,
    procs_wide: ProcMap<WideTable>,
    layout: Layout,
    forced_shift: Option<u32>,
}

impl<P> Default for Index<P> {
    fn default() -> Self {
        Index {
            records: Vec::new(),
            started: 0,
            global: Class::default(),
            global_wide: WideTable::default(),
            procs: Class::default(),
            procs_wide: ProcMap::default(),
            layout: Layout::Auto,
            forced_shift: None,
        }
    }
}

impl<P> Index<P> {
    /// Calls `f(slot, record)` for every started object that may hold `pc` for a sample of
    /// `process`: a superset of the matches (the caller checks range, source and affinity),
    /// each object at most once.
    ///
    /// The usual case (one class's bounds hold `pc`, no wide object, a key of one member or two
    /// disjoint ones) probes one map and yields one candidate: of two disjoint members, the only
    /// one whose range can hold `pc`, picked by the slot's split point without reading either
    /// record. So a sample in a layout of non-overlapping objects reads one slot and one record,
    /// however many objects share its chunk (up to two; three or more go through the chunk's
    /// stabbing structure).
    #[inline(always)]
    pub(crate) fn candidates<F: FnMut(u32, &Rec<P>)>(&self, pc: u64, process: Option<u64>, f: F) {
        let in_procs = process.is_some() & self.procs.covers(pc);
        let in_global = self.global.covers(pc);
        let no_wide = (self.procs.wide | self.global.wide) == 0;
        // Branches on the sample alone (its PC against the class bounds): a misprediction costs
        // no cache miss, and the probed class's fields load in parallel with the hash.
        if in_procs & !in_global & no_wide {
            self.probe(&self.procs, process.unwrap_or(0), pc, f);
        } else if in_global & !in_procs & no_wide {
            self.probe(&self.global, 0, pc, f);
        } else if in_procs | in_global {
            self.candidates_general(pc, process, f);
        }
    }

    /// Probes one class's map for `pc` with process key `key` (0 for the global class, whose
    /// records carry key 0 and which lists no other records).
    #[inline(always)]
    fn probe<F: FnMut(u32, &Rec<P>)>(&self, class: &Class, key: u64, pc: u64, mut f: F) {
        let records = &self.records;
        let mut visit = |id: u32| {
            if let Some(r) = rec(records, id) {
                if r.process_key == key {
                    f(id, r);
                }
            }
        };
        match class.map.lookup(key, pc) {
            Members::One(id) => visit(id),
            Members::None => {}
            Members::Overlapping([first, second]) => {
                visit(first);
                visit(second);
            }
            Members::Crowd(c) => c.query(pc, visit),
        }
    }

    /// [`Index::candidates`] for every case: both classes and the wide tables.
    #[cold]
    fn candidates_general<F: FnMut(u32, &Rec<P>)>(&self, pc: u64, process: Option<u64>, mut f: F) {
        let records = &self.records;
        // `owner`: the process the record must profile (a chunk-map slot may hold another
        // process's objects, keys being hashes); `None` where the table is exact.
        let mut visit = |id: u32, owner: Option<u64>| {
            if let Some(r) = rec(records, id) {
                if owner.map_or(true, |k| r.process_key == k) {
                    f(id, r);
                }
            }
        };
        if let (Some(key), true) = (process, self.procs.covers(pc)) {
            if self.procs.map.keys() != 0 {
                self.procs.map.get(key, pc, |id| visit(id, Some(key)));
            }
            if self.procs.wide != 0 {
                if let Some(w) = self.procs_wide.get(key) {
                    w.query(pc, |id| visit(id, None));
                }
            }
        }
        if !self.global.covers(pc) {
            return;
        }
        if self.global.map.keys() != 0 {
            self.global.map.get(0, pc, |id| visit(id, None));
        }
        if self.global.wide != 0 {
            self.global_wide.query(pc, |id| visit(id, None));
        }
    }

    /// Every started object's record with its slot.
    pub(crate) fn records(&self) -> impl Iterator<Item = (u32, &Rec<P>)> {
        (0u32..)
            .zip(self.records.iter())
            .filter_map(|(slot, l)| l.0.as_ref().map(|r| (slot, r)))
    }

    /// Started objects.
    pub(crate) fn len(&self) -> usize {
        self.started
    }

    /// Forces the wide tables' layout (tests and benchmarks).
    pub(crate) fn set_layout(&mut self, layout: Layout) {
        self.layout = layout;
        self.rebuild(true);
        self.rebuild(false);
    }

    /// Forces one chunk shift for both classes (tests), or `None` for the adaptive policy.
    pub(crate) fn set_chunk_shift(&mut self, shift: Option<u32>) {
        self.forced_shift = shift.map(|s| s.clamp(MIN_CHUNK_SHIFT, MAX_CHUNK_SHIFT));
        self.rebuild(true);
        self.rebuild(false);
    }

    pub(crate) fn stats(&self) -> IndexStats {
        IndexStats {
            started: self.started,
            global_chunk_shift: self.global.shift(),
            process_chunk_shift: self.procs.shift(),
            wide: self.global.wide + self.procs.wide,
            keys: self.global.map.keys() + self.procs.map.keys(),
            memberships: self.global.map.members() + self.procs.map.members(),
            bytes: self.records.len() * core::mem::size_of::<Line<Option<Rec<P>>>>()
                + self.global.map.bytes()
                + self.procs.map.bytes(),
        }
    }

    /// Makes the object in manager slot `slot` visible to lookups.
    pub(crate) fn insert(&mut self, slot: u32, id: ObjectId, config: &ObjectConfig, pin: P) {
        let record = Rec {
            base: config.base,
            end: config.end(),
            group0: config.affinity.group0(),
            counters_len: config.counters_len(),
            id,
            process_key: config.process.unwrap_or(0),
            pin,
            source: config.source,
            // BucketSize is 2..=31 once validated.
            shift: u8::try_from(config.bucket_size).unwrap_or(u8::MAX),
            higher_groups: config.affinity.has_higher_groups(),
            global: config.process.is_none(),
        };
        let (base, end, global) = (record.base, record.end, record.global);
        let at = slot as usize;
        if self.records.len() <= at {
            self.records.resize_with(at + 1, || Line(None));
        }
        debug_assert!(self.records[at].0.is_none(), "slot {slot} started twice");
        self.records[at] = Line(Some(record));
        self.started += 1;
        if base >= end {
            return; // an empty range never matches; nothing to index
        }
        let adaptive = self.forced_shift.is_none();
        let class = self.class_mut(global);
        class.account(base, end, true);
        class.widen(base, end);
        if adaptive && class.wants_rebuild() {
            self.rebuild(global);
        } else {
            self.link(slot, false);
        }
    }

    /// Removes the object in `slot` (if it is `id`); returns its pin token.
    pub(crate) fn remove(&mut self, slot: u32, id: ObjectId) -> Option<P> {
        let (base, end, global) = match rec(&self.records, slot) {
            Some(r) if r.id == id => (r.base, r.end, r.global),
            _ => return None,
        };
        if base < end {
            self.unlink(slot);
        }
        let record = self.records[slot as usize].0.take()?;
        self.started -= 1;
        if base < end {
            let adaptive = self.forced_shift.is_none();
            let class = self.class_mut(global);
            class.account(base, end, false);
            if adaptive && class.wants_rebuild() {
                self.rebuild(global);
            }
        }
        Some(record.pin)
    }

    /// Lists the record in `slot` under its chunks, or in its wide table. With `defer`, a wide
    /// table and crowded chunks are left for the caller to rebuild.
    fn link(&mut self, slot: u32, defer: bool) {
        let Index {
            records,
            global,
            global_wide,
            procs,
            procs_wide,
            layout,
            ..
        } = self;
        let r = match rec(records, slot) {
            Some(r) => r,
            None => return,
        };
        let (class, a) = class_of(r, global, procs);
        let s = class.shift();
        if span(r.base, r.end, s) <= MAX_SPAN {
            for chunk in (r.base >> s)..=((r.end - 1) >> s) {
                class
                    .map
                    .insert(a, chunk, slot, |id| member(records, id), defer);
            }
            return;
        }
        class.wide += 1;
        let table = if r.global {
            global_wide
        } else {
            procs_wide.get_or_insert_with(a, WideTable::default)
        };
        table.insert(slot);
        if !defer {
            table.rebuild(|id| range_of(records, id), *layout);
        }
    }

    /// Undoes [`Index::link`] for the record in `slot`.
    fn unlink(&mut self, slot: u32) {
        let Index {
            records,
            global,
            global_wide,
            procs,
            procs_wide,
            layout,
            ..
        } = self;
        let r = match rec(records, slot) {
            Some(r) => r,
            None => return,
        };
        let (class, a) = class_of(r, global, procs);
        let s = class.shift();
        if span(r.base, r.end, s) <= MAX_SPAN {
            for chunk in (r.base >> s)..=((r.end - 1) >> s) {
                let removed = class.map.remove(a, chunk, slot, |id| member(records, id));
                debug_assert!(removed, "slot {slot} listed under each of its chunks");
            }
            return;
        }
        class.wide -= 1;
        if r.global {
            global_wide.remove(slot);
            global_wide.rebuild(|id| range_of(records, id), *layout);
        } else if let Some(table) = procs_wide.get_mut(a) {
            table.remove(slot);
            if table.is_empty() {
                procs_wide.remove(a);
            } else {
                table.rebuild(|id| range_of(records, id), *layout);
            }
        }
    }

    /// The global or the per-process class.
    fn class_mut(&mut self, global: bool) -> &mut Class {
        if global {
            &mut self.global
        } else {
            &mut self.procs
        }
    }

    /// Re-indexes one class under its ideal (or the forced) shift.
    fn rebuild(&mut self, global: bool) {
        let forced = self.forced_shift;
        let class = self.class_mut(global);
        let shift = forced.unwrap_or_else(|| class.ideal());
        let expected = usize::try_from(class.cost_at(shift)).unwrap_or(usize::MAX);
        class.map = ChunkMap::with_capacity(expected, shift);
        class.changes = 0;
        class.wide = 0;
        class.span = 0;
        if global {
            self.global_wide = WideTable::default();
        } else {
            self.procs_wide = ProcMap::default();
        }
        let members: Vec<u32> = self
            .records()
            .filter(|(_, r)| r.global == global && r.base < r.end)
            .map(|(slot, _)| slot)
            .collect();
        for slot in members {
            if let Some((base, end)) = rec(&self.records, slot).map(|r| (r.base, r.end)) {
                self.class_mut(global).widen(base, end);
            }
            self.link(slot, true);
        }
        let (records, layout) = (&self.records, self.layout);
        let class = if global {
            &mut self.global
        } else {
            &mut self.procs
        };
        class.map.rebuild_crowds(|id| member(records, id));
        if global {
            self.global_wide.rebuild(|id| range_of(records, id), layout);
        } else {
            for table in self.procs_wide.values_mut() {
                table.rebuild(|id| range_of(records, id), layout);
            }
        }
    }
}
