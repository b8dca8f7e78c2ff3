//! A small open-addressing hash map from process key to that process's table. `alloc` has no
//! hash map; lookups happen once per sample, inserts and removals only on start and stop.

use alloc::vec;
use alloc::vec::Vec;

const EMPTY: u32 = u32::MAX;

/// Map from process key to `T`.
#[derive(Clone, Debug)]
pub struct ProcMap<T> {
    /// (key, index into `values`), `EMPTY` index for a free slot. Length a power of two.
    slots: Vec<(u64, u32)>,
    values: Vec<(u64, T)>,
    shift: u32,
}

impl<T> Default for ProcMap<T> {
    fn default() -> Self {
        ProcMap {
            slots: vec![(0, EMPTY); 8],
            values: Vec::new(),
            shift: 64 - 3,
        }
    }
}

impl<T> ProcMap<T> {
    #[inline]
    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: the multiply mixes the page-aligned key into the top bits.
        usize::try_from(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift).unwrap_or(0)
    }

    fn find_slot(&self, key: u64) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let (k, v) = self.slots[i];
            if v == EMPTY {
                return Err(i);
            }
            if k == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The value for `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&T> {
        match self.find_slot(key) {
            Ok(i) => Some(&self.values[self.slots[i].1 as usize].1),
            Err(_) => None,
        }
    }

    /// The value for `key`, inserting `make()` if absent.
    pub fn get_or_insert_with<F: FnOnce() -> T>(&mut self, key: u64, make: F) -> &mut T {
        let idx = match self.find_slot(key) {
            Ok(i) => self.slots[i].1 as usize,
            Err(i) => {
                let idx = self.values.len();
                self.values.push((key, make()));
                let idx32 = u32::try_from(idx).expect("fewer than 2^32 processes");
                self.slots[i] = (key, idx32);
                if self.values.len() * 2 > self.slots.len() {
                    self.rehash();
                }
                idx
            }
        };
        &mut self.values[idx].1
    }

    /// The value for `key`, mutably.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut T> {
        match self.find_slot(key) {
            Ok(i) => {
                let idx = self.slots[i].1 as usize;
                Some(&mut self.values[idx].1)
            }
            Err(_) => None,
        }
    }

    /// Removes `key`; rebuilds the slot array (O(processes), removals are rare).
    pub fn remove(&mut self, key: u64) -> Option<T> {
        let i = self.find_slot(key).ok()?;
        let idx = self.slots[i].1 as usize;
        let (_, value) = self.values.swap_remove(idx);
        self.rehash();
        Some(value)
    }

    /// The values, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.values.iter().map(|(_, v)| v)
    }

    /// Number of keys.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.values.len()
    }

    fn rehash(&mut self) {
        let cap = (self.values.len() * 2).max(8).next_power_of_two();
        self.shift = 64 - cap.trailing_zeros();
        self.slots = vec![(0, EMPTY); cap];
        for idx in 0..self.values.len() {
            let key = self.values[idx].0;
            if let Err(i) = self.find_slot(key) {
                self.slots[i] = (key, u32::try_from(idx).expect("fewer than 2^32 processes"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ProcMap;

    #[test]
    fn insert_get_remove_many_keys() {
        let mut map = ProcMap::default();
        for k in 0..1000u64 {
            *map.get_or_insert_with(k << 12, || 0) += k;
        }
        assert_eq!(map.len(), 1000);
        for k in 0..1000u64 {
            assert_eq!(map.get(k << 12), Some(&k));
        }
        for k in (0..1000u64).step_by(2) {
            assert_eq!(map.remove(k << 12), Some(k));
        }
        assert_eq!(map.get(0), None);
        assert_eq!(map.get(1 << 12), Some(&1));
        assert_eq!(map.len(), 500);
    }
}
