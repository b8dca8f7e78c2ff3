//! An open-addressing hash map from a two-word key (process key, chunk number) to a short list
//! of object indices: the heart of the attribution index.
//!
//! * Capacity a power of two, Fibonacci (multiplicative) hashing, linear probing, load at most
//!   [`MAX_LOAD_NUM`]/[`MAX_LOAD_DEN`]; deletion shifts later entries back (no tombstones), so a
//!   lookup stops at the first empty slot whatever the history of inserts and removals.
//! * A slot is 16 bytes (four per cache line): the key's 64-bit hash and two members. Two
//!   members whose ranges are disjoint are kept in order of base, so a lookup picks the one that
//!   can hold the PC by comparing it with the second's base, without a branch; two that overlap
//!   are flagged and both are candidates. A key with more members (a crowded chunk: nested or packed objects) keeps them in a separate
//!   [`Crowd`]: the list plus a [`Stab`] over the members' ranges, so that a lookup yields only
//!   the members whose range holds the PC (O(log k + hits), not O(k)) and never touches the
//!   records of the others. It is rebuilt on each insert or remove under its key.
//! * **Keys are identified by their hash.** Two keys with the same 64-bit hash share a slot, so
//!   a lookup may return objects of the other key too: the caller checks each candidate's
//!   process and range anyway, so the answer stays exact. For a fixed process key the hash is a
//!   bijection of the chunk number (xor, then a multiply by an odd constant), so the chunks of
//!   one object never share a slot and no object is listed twice under one slot.
//!
//! `alloc` has no hash map, and a lookup here must be a handful of instructions: two multiplies
//! for the home slot, one cache line, no pointer chasing.

use alloc::vec;
use alloc::vec::Vec;

use super::stab::{Layout, Stab};

/// Grow when more than this fraction of slots is used...
const MAX_LOAD_NUM: usize = 3;
/// ... (denominator).
const MAX_LOAD_DEN: usize = 4;
/// Smallest capacity (slots).
const MIN_CAPACITY: usize = 8;
/// `ids[0]` of a free slot; `ids[1]` of a slot with one member.
pub(crate) const EMPTY: u32 = u32::MAX;
/// Set in `ids[0]` when the members are in `spill[ids[0] & !SPILL]`.
const SPILL: u32 = 1 << 31;
/// Set in `ids[1]` when the two inline members' ranges overlap.
const OVERLAP: u32 = 1 << 31;
/// Member ids must be at most this (manager slots are below 2^30: handles fit in 32 bits), so
/// that no id with [`OVERLAP`] set is [`EMPTY`].
pub(crate) const MAX_ID: u32 = SPILL - 2;

/// One slot: free (`ids[0] == EMPTY`), one or two members inline (`ids[1] == EMPTY` for one;
/// for two, in order of base unless `ids[1] & OVERLAP`), or spilled (`ids[0] & SPILL`, three
/// or more members).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
struct Slot {
    hash: u64,
    ids: [u32; 2],
}

const FREE: Slot = Slot {
    hash: 0,
    ids: [EMPTY, EMPTY],
};

impl Slot {
    #[inline]
    fn is_free(&self) -> bool {
        self.ids[0] == EMPTY
    }

    #[inline]
    /// The spill list of an occupied slot, if its members are there.
    fn spilled(&self) -> Option<usize> {
        if self.ids[0] & SPILL != 0 {
            Some((self.ids[0] & !SPILL) as usize)
        } else {
            None
        }
    }
}

/// What [`ChunkMap::lookup`] found.
pub(crate) enum Members<'a> {
    /// No member.
    None,
    /// One member (`second` is [`EMPTY`]) or two disjoint ones, the lower first: only `second`
    /// can hold a PC at or above its base, only `first` one below it.
    Disjoint { first: u32, second: u32 },
    /// Two members whose ranges overlap: both are candidates.
    Overlapping([u32; 2]),
    /// Three or more.
    Crowd(&'a Crowd),
}

/// The members of a crowded key (three or more), with a stabbing structure over their ranges.
#[derive(Clone, Debug, Default)]
pub(crate) struct Crowd {
    ids: Vec<u32>,
    stab: Stab,
}

impl Crowd {
    /// Calls `f` for each member whose range holds `pc`.
    #[inline]
    pub(crate) fn query<F: FnMut(u32)>(&self, pc: u64, mut f: F) {
        self.stab.query(pc, |m| {
            if let Some(&id) = self.ids.get(m as usize) {
                f(id);
            }
        });
    }

    fn rebuild<R: Fn(u32) -> (u64, u64)>(&mut self, range: R) {
        let ranges: Vec<(u64, u64)> = self.ids.iter().map(|&id| range(id)).collect();
        self.stab = Stab::build(&ranges, Layout::Auto);
    }
}

/// The map. Keys are `(a, b)`: (process key, chunk) for per-process objects, (0, chunk) for
/// global ones (which live in a map of their own).
#[derive(Clone, Debug)]
pub(crate) struct ChunkMap {
    slots: Vec<Slot>,
    /// `64 - log2(capacity)`: the home slot is the top bits of the hash.
    shift: u32,
    /// Occupied slots.
    used: usize,
    /// Total members over all slots.
    members: usize,
    spill: Vec<Crowd>,
    spill_free: Vec<u32>,
}

impl Default for ChunkMap {
    fn default() -> Self {
        ChunkMap::with_capacity(0)
    }
}

/// The key's hash: `(a * C1 ^ b) * C2`. Both constants are odd, so for a fixed `a` this is a
/// bijection of `b`; the first multiply spreads the process key (a multiple of 4096) over all
/// bits, the second mixes the chunk number into the top bits, which pick the home slot.
#[inline]
fn hash(a: u64, b: u64) -> u64 {
    (a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// The inline pair for members `a` and `b`: in order of base, or flagged if they overlap.
fn pair<R: Fn(u32) -> (u64, u64)>(a: u32, b: u32, range: &R) -> [u32; 2] {
    let ((a0, a1), (b0, b1)) = (range(a), range(b));
    if a0 < b1 && b0 < a1 {
        [a, b | OVERLAP]
    } else if b0 < a0 {
        [b, a]
    } else {
        [a, b]
    }
}

fn to_u32(x: usize) -> u32 {
    // Spill lists: at most one per occupied slot, far below 2^31.
    u32::try_from(x).expect("chunk map sizes fit in u32")
}

impl ChunkMap {
    /// A map sized for about `keys` keys.
    pub(crate) fn with_capacity(keys: usize) -> ChunkMap {
        let cap = (keys.saturating_mul(MAX_LOAD_DEN) / MAX_LOAD_NUM + 1)
            .max(MIN_CAPACITY)
            .next_power_of_two();
        ChunkMap {
            slots: vec![FREE; cap],
            shift: 64 - cap.trailing_zeros(),
            used: 0,
            members: 0,
            spill: Vec::new(),
            spill_free: Vec::new(),
        }
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        // The shift is at least 1, so the result is below the capacity, a usize.
        usize::try_from(hash >> self.shift).unwrap_or(0)
    }

    /// The slot holding `hash`, or the free slot where it would go.
    #[inline(always)]
    fn find(&self, hash: u64) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let s = &self.slots[i];
            if s.is_free() {
                return Err(i);
            }
            if s.hash == hash {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The members of `(a, b)`, possibly with members of other keys of the same hash.
    #[inline(always)]
    pub(crate) fn lookup(&self, a: u64, b: u64) -> Members<'_> {
        let i = match self.find(hash(a, b)) {
            Ok(i) => i,
            Err(_) => return Members::None,
        };
        let s = &self.slots[i];
        match s.spilled() {
            None if s.ids[1] != EMPTY && s.ids[1] & OVERLAP != 0 => {
                Members::Overlapping([s.ids[0], s.ids[1] & !OVERLAP])
            }
            None => Members::Disjoint {
                first: s.ids[0],
                second: s.ids[1],
            },
            Some(at) => self.spill.get(at).map_or(Members::None, Members::Crowd),
        }
    }

    /// Calls `f` for the members of `(a, b)` that may hold `pc` (none if absent), possibly
    /// with members of other keys of the same hash: a crowded key yields only the members whose
    /// range holds `pc`, two inline members both.
    #[inline]
    pub(crate) fn get<F: FnMut(u32)>(&self, a: u64, b: u64, pc: u64, mut f: F) {
        match self.lookup(a, b) {
            Members::None => {}
            Members::Disjoint { first, second } => {
                f(first);
                if second != EMPTY {
                    f(second);
                }
            }
            Members::Overlapping([first, second]) => {
                f(first);
                f(second);
            }
            Members::Crowd(c) => c.query(pc, f),
        }
    }

    /// Every member of `(a, b)` (tests).
    #[cfg(test)]
    fn all(&self, a: u64, b: u64) -> Vec<u32> {
        match self.find(hash(a, b)) {
            Err(_) => Vec::new(),
            Ok(i) => match self.slots[i].spilled() {
                None => self.slots[i]
                    .ids
                    .iter()
                    .copied()
                    .filter(|&m| m != EMPTY)
                    .map(|m| m & !OVERLAP)
                    .collect(),
                Some(at) => self.spill[at].ids.clone(),
            },
        }
    }

    /// Adds `id` (at most [`MAX_ID`]) to the members of `(a, b)`; `range(id)` gives a member's
    /// `[base, end)`. With `defer`, a crowded key's structure is left for
    /// [`ChunkMap::rebuild_crowds`] (bulk loading). (The caller never adds an id twice to one
    /// key.)
    pub(crate) fn insert<R: Fn(u32) -> (u64, u64)>(
        &mut self,
        a: u64,
        b: u64,
        id: u32,
        range: R,
        defer: bool,
    ) {
        debug_assert!(id <= MAX_ID);
        if (self.used + 1) * MAX_LOAD_DEN > self.slots.len() * MAX_LOAD_NUM {
            self.resize(self.slots.len() * 2);
        }
        let h = hash(a, b);
        self.members += 1;
        let i = match self.find(h) {
            Ok(i) => i,
            Err(i) => {
                self.slots[i] = Slot {
                    hash: h,
                    ids: [id, EMPTY],
                };
                self.used += 1;
                return;
            }
        };
        let s = &mut self.slots[i];
        if let Some(at) = s.spilled() {
            self.spill[at].ids.push(id);
            if !defer {
                self.spill[at].rebuild(range);
            }
        } else if s.ids[1] == EMPTY {
            s.ids = pair(s.ids[0], id, &range);
        } else {
            let mut list = Crowd {
                ids: vec![s.ids[0], s.ids[1] & !OVERLAP, id],
                stab: Stab::default(),
            };
            if !defer {
                list.rebuild(range);
            }
            let at = match self.spill_free.pop() {
                Some(at) => {
                    self.spill[at as usize] = list;
                    at
                }
                None => {
                    self.spill.push(list);
                    to_u32(self.spill.len() - 1)
                }
            };
            s.ids = [at | SPILL, EMPTY];
        }
    }

    /// Removes `id` from the members of `(a, b)`; false if it was not there. `range` as for
    /// [`ChunkMap::insert`].
    pub(crate) fn remove<R: Fn(u32) -> (u64, u64)>(
        &mut self,
        a: u64,
        b: u64,
        id: u32,
        range: R,
    ) -> bool {
        let i = match self.find(hash(a, b)) {
            Ok(i) => i,
            Err(_) => return false,
        };
        let s = &mut self.slots[i];
        if let Some(at) = s.spilled() {
            let list = &mut self.spill[at];
            match list.ids.iter().position(|&m| m == id) {
                Some(pos) => list.ids.swap_remove(pos),
                None => return false,
            };
            if list.ids.len() == 2 {
                s.ids = pair(list.ids[0], list.ids[1], &range);
                self.spill[at] = Crowd::default();
                self.spill_free.push(to_u32(at));
            } else {
                list.rebuild(range);
            }
        } else if s.ids[1] != EMPTY && s.ids[1] & !OVERLAP == id {
            s.ids[1] = EMPTY;
        } else if s.ids[0] == id {
            s.ids[0] = if s.ids[1] == EMPTY {
                EMPTY
            } else {
                s.ids[1] & !OVERLAP
            };
            s.ids[1] = EMPTY;
            if s.is_free() {
                self.delete_slot(i);
                self.used -= 1;
                if self.used * 8 < self.slots.len() && self.slots.len() > MIN_CAPACITY {
                    self.resize(self.slots.len() / 2);
                }
            }
        } else {
            return false;
        }
        self.members -= 1;
        true
    }

    /// Frees slot `i` by shifting back the entries of its probe run that may move.
    fn delete_slot(&mut self, i: usize) {
        let mask = self.slots.len() - 1;
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.is_free() {
                break;
            }
            let home = self.home(s.hash);
            // The entry at j may fill the hole if the hole lies on its probe path [home, j).
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = FREE;
    }

    fn resize(&mut self, cap: usize) {
        let cap = cap.max(MIN_CAPACITY);
        let old = core::mem::replace(&mut self.slots, vec![FREE; cap]);
        self.shift = 64 - cap.trailing_zeros();
        for s in old.into_iter().filter(|s| !s.is_free()) {
            if let Err(i) = self.find(s.hash) {
                self.slots[i] = s;
            }
        }
    }

    /// Builds every crowded key's structure (after inserts without ranges).
    pub(crate) fn rebuild_crowds<R: Fn(u32) -> (u64, u64)>(&mut self, range: R) {
        for c in self.spill.iter_mut().filter(|c| !c.ids.is_empty()) {
            c.rebuild(&range);
        }
    }

    /// Occupied slots (distinct key hashes).
    pub(crate) fn keys(&self) -> usize {
        self.used
    }

    /// Members over all keys.
    pub(crate) fn members(&self) -> usize {
        self.members
    }

    /// Bytes of slots and spill lists.
    pub(crate) fn bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<Slot>()
            + self
                .spill
                .iter()
                .map(|c| c.ids.capacity() * 4 + c.stab.stored() * 12)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test ranges: member `id` covers `[id * 10, id * 10 + 15)`.
    fn range(id: u32) -> (u64, u64) {
        (u64::from(id) * 10, u64::from(id) * 10 + 15)
    }

    fn sorted(m: &ChunkMap, a: u64, b: u64) -> Vec<u32> {
        let mut v = m.all(a, b);
        v.sort_unstable();
        v
    }

    fn at(m: &ChunkMap, a: u64, b: u64, pc: u64) -> Vec<u32> {
        let mut v = Vec::new();
        m.get(a, b, pc, |id| v.push(id));
        v.sort_unstable();
        v
    }

    #[test]
    fn slots_are_a_quarter_cache_line() {
        assert_eq!(core::mem::size_of::<Slot>(), 16);
        assert_eq!(core::mem::align_of::<Slot>(), 16);
    }

    #[test]
    fn insert_spill_and_remove_back_to_inline() {
        let mut m = ChunkMap::default();
        for id in 0..10 {
            m.insert(0x1000, 7, id, range, false);
        }
        assert_eq!(sorted(&m, 0x1000, 7), (0..10).collect::<Vec<_>>());
        assert_eq!(m.all(0x2000, 7), Vec::<u32>::new());
        // Crowded: only the members whose range holds the PC.
        assert_eq!(at(&m, 0x1000, 7, 42), vec![3, 4]);
        assert_eq!(at(&m, 0x1000, 7, 500), Vec::<u32>::new());
        for id in (0..10).rev().step_by(2) {
            assert!(m.remove(0x1000, 7, id, range));
        }
        assert!(!m.remove(0x1000, 7, 9, range));
        assert_eq!(sorted(&m, 0x1000, 7), vec![0, 2, 4, 6, 8]);
        for id in [0, 2, 4] {
            assert!(m.remove(0x1000, 7, id, range));
        }
        assert_eq!(sorted(&m, 0x1000, 7), vec![6, 8]);
        assert!(m.slots.iter().all(|s| s.is_free() || s.spilled().is_none()));
        assert_eq!(m.spill_free.len(), 1);
        m.insert(0x1000, 7, 1, range, false);
        m.insert(0x1000, 7, 3, range, false);
        assert_eq!(sorted(&m, 0x1000, 7), vec![1, 3, 6, 8]);
        assert_eq!(m.spill_free.len(), 0, "the freed spill list is reused");
    }

    fn pair_of(m: &ChunkMap, a: u64, b: u64) -> Option<(u32, u32, bool)> {
        match m.lookup(a, b) {
            Members::Disjoint { first, second } => Some((first, second, false)),
            Members::Overlapping([first, second]) => Some((first, second, true)),
            _ => None,
        }
    }

    #[test]
    fn two_disjoint_members_are_kept_in_order_of_base_and_overlaps_are_flagged() {
        // Ranges: 5 -> [50, 65), 7 -> [70, 85): disjoint; 6 -> [60, 75) overlaps both.
        let mut m = ChunkMap::default();
        m.insert(1, 1, 7, range, false);
        assert_eq!(pair_of(&m, 1, 1), Some((7, EMPTY, false)));
        m.insert(1, 1, 5, range, false);
        assert_eq!(pair_of(&m, 1, 1), Some((5, 7, false)), "lower base first");
        assert!(m.remove(1, 1, 5, range));
        m.insert(1, 1, 6, range, false);
        assert_eq!(pair_of(&m, 1, 1), Some((7, 6, true)));
        assert_eq!(sorted(&m, 1, 1), vec![6, 7]);
        // A crowd that shrinks back to two is ordered again.
        m.insert(1, 1, 5, range, false);
        assert!(matches!(m.lookup(1, 1), Members::Crowd(_)));
        assert!(m.remove(1, 1, 6, range));
        assert_eq!(pair_of(&m, 1, 1), Some((5, 7, false)));
        // Removing the first of a pair leaves the second alone, unflagged.
        m.insert(2, 2, 7, range, false);
        m.insert(2, 2, 6, range, false);
        assert!(m.remove(2, 2, 7, range));
        assert_eq!(pair_of(&m, 2, 2), Some((6, EMPTY, false)));
        assert!(!m.remove(2, 2, 7, range));
    }

    #[test]
    fn many_keys_survive_growth_shrink_and_backward_shift_deletion() {
        let mut m = ChunkMap::default();
        let key = |k: u64| ((k % 7) << 12, k / 7);
        for k in 0..5000u64 {
            let (a, b) = key(k);
            m.insert(a, b, u32::try_from(k).unwrap(), range, false);
        }
        assert_eq!(m.keys(), 5000);
        for k in (0..5000u64).filter(|k| k % 3 != 0) {
            let (a, b) = key(k);
            assert!(m.remove(a, b, u32::try_from(k).unwrap(), range));
        }
        for k in 0..5000u64 {
            let (a, b) = key(k);
            let want: Vec<u32> = if k % 3 == 0 {
                vec![u32::try_from(k).unwrap()]
            } else {
                vec![]
            };
            assert_eq!(m.all(a, b), want, "key {k}");
        }
        assert_eq!(m.members(), 1667);
        assert!(m.slots.len() <= 8192, "shrank to {}", m.slots.len());
    }
}
