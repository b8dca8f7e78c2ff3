//! The samples a watch has seen, per guest thread and bucket: all of them, and a recent window
//! in which each sample's weight halves every `half_life` seconds.

use std::collections::HashMap;

/// A thread row of the run's process table, or none for samples no thread was named for.
pub type ThreadKey = Option<u32>;

/// Samples per (thread, bucket index): the total, and the decayed recent weight.
#[derive(Debug, Default)]
pub struct Tally {
    cells: HashMap<(ThreadKey, u64), Cell>,
}

/// One thread's samples in one bucket.
#[derive(Debug, Default, Clone, Copy)]
pub struct Cell {
    /// Every sample.
    pub total: u64,
    /// The recent weight (samples, each decayed by its age).
    pub recent: f64,
}

/// Recent weights below this are dropped with their cell's total kept.
const NEGLIGIBLE: f64 = 1e-6;

/// What a recent weight is multiplied by after `elapsed_s` with a half life of `half_life_s`
/// (1 when no time passed or there is no half life).
pub fn decay(elapsed_s: f64, half_life_s: f64) -> f64 {
    if elapsed_s <= 0.0 || half_life_s <= 0.0 {
        return 1.0;
    }
    0.5f64.powf(elapsed_s / half_life_s)
}

impl Tally {
    /// Ages every recent weight by `elapsed_s` with a half life of `half_life_s`.
    pub fn age(&mut self, elapsed_s: f64, half_life_s: f64) {
        let factor = decay(elapsed_s, half_life_s);
        if factor == 1.0 {
            return;
        }
        for c in self.cells.values_mut() {
            c.recent *= factor;
            if c.recent < NEGLIGIBLE {
                c.recent = 0.0;
            }
        }
    }

    /// Adds `n` new samples of `thread` in `bucket`.
    pub fn add(&mut self, thread: ThreadKey, bucket: u64, n: u64) {
        let c = self.cells.entry((thread, bucket)).or_default();
        c.total += n;
        c.recent += n as f64;
    }

    /// Forgets everything (the profile was read from zero again).
    pub fn clear(&mut self) {
        self.cells.clear();
    }

    /// Every cell.
    pub fn cells(&self) -> impl Iterator<Item = (ThreadKey, u64, Cell)> + '_ {
        self.cells.iter().map(|(&(t, b), &c)| (t, b, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_weights_halve_every_half_life_and_totals_stay() {
        let mut t = Tally::default();
        t.add(Some(1), 7, 8);
        t.age(2.0, 1.0);
        t.add(Some(1), 7, 2);
        t.add(None, 9, 1);
        let mut cells: Vec<_> = t.cells().collect();
        cells.sort_by_key(|c| c.1);
        assert_eq!((cells[0].2.total, cells[0].2.recent), (10, 4.0));
        assert_eq!((cells[1].0, cells[1].2.total), (None, 1));
        t.age(1000.0, 1.0);
        assert!(t.cells().all(|(_, _, c)| c.recent == 0.0 && c.total > 0));
    }
}
