//! One prefix-index shard's map from page key to holders: open addressing with linear probing,
//! each slot the key and its holders (32 bytes), vacant where it has no holders.
//!
//! Why not `HashMap`: a stream of unique long prompts makes every page a new entry that pushes
//! out an old one, each in a map of megabytes, so each is a cache miss. `hashbrown` picks a new
//! entry's bucket inside `insert`, so nothing can fetch that bucket ahead; the misses then come
//! one after another (the new bucket's line is written, then read back, before the next page is
//! looked at). Here a key's slot is known from the key alone: `warm` reads the slots of a
//! prompt's pages, or of a batch of entries about to be evicted, in a loop with nothing else in
//! it, so their misses overlap, and the work that follows finds the lines in cache.
//!
//! The slot is picked from the key mixed with a per-table random seed: page keys are unkeyed
//! hashes of a client's tokens, and a client who could aim them at one run of slots would make
//! every probe long.

use std::hash::BuildHasher;

use smallvec::SmallVec;

use crate::workers::page_key::mix64;
use crate::workers::WorkerId;

/// The workers holding a page, sorted by worker, each with its recency slot; up to two inline.
pub type Holders = SmallVec<[(WorkerId, u32); 2]>;

#[derive(Default)]
struct Slot {
    key: u64,
    /// Empty: the slot is vacant (its key means nothing).
    holders: Holders,
}

pub struct PageTable {
    /// A power of two long and at most 5/8 full (`grow`), so every probe ends at a vacant slot,
    /// after about four slots (two cache lines) for a key that is not here.
    slots: Box<[Slot]>,
    len: usize,
    seed: u64,
}

impl Default for PageTable {
    fn default() -> PageTable {
        PageTable::with_slots(
            16,
            std::collections::hash_map::RandomState::new().hash_one(0u64),
        )
    }
}

impl PageTable {
    fn with_slots(n: usize, seed: u64) -> PageTable {
        PageTable {
            slots: (0..n).map(|_| Slot::default()).collect(),
            len: 0,
            seed,
        }
    }

    /// Pages held.
    pub fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        mix64(key ^ self.seed) as usize & self.mask()
    }

    /// Where `key` is.
    #[inline]
    pub fn find(&self, key: u64) -> Option<usize> {
        let mut i = self.home(key);
        loop {
            let slot = self.slots.get(i)?;
            if slot.holders.is_empty() {
                return None;
            }
            if slot.key == key {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    pub fn get(&self, key: u64) -> Option<&Holders> {
        self.find(key)
            .and_then(|i| self.slots.get(i))
            .map(|s| &s.holders)
    }

    /// The holders in slot `at` (from `find`), to add to: taking the last one out is
    /// `remove_holder`'s, which also empties the slot.
    pub fn holders_mut(&mut self, at: usize) -> Option<&mut Holders> {
        self.slots.get_mut(at).map(|s| &mut s.holders)
    }

    /// Adds `key`, which must not be here, with its (non-empty) holders.
    pub fn insert_new(&mut self, key: u64, holders: Holders) {
        if holders.is_empty() {
            return;
        }
        // 5/8 rather than 1/2: a shard at a budget of 2^k pages goes one over it before it
        // evicts, which at 1/2 would double its table for that one entry.
        if 8 * (self.len + 1) > 5 * self.slots.len() {
            self.grow();
        }
        let mut i = self.home(key);
        while let Some(slot) = self.slots.get_mut(i) {
            if slot.holders.is_empty() {
                *slot = Slot { key, holders };
                self.len += 1;
                return;
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Takes `worker` out of the holders in slot `at` (from `find`), and the page with it when
    /// no holder is left.
    pub fn remove_holder(&mut self, at: usize, worker: WorkerId) {
        let Some(slot) = self.slots.get_mut(at) else {
            return;
        };
        if slot.holders.is_empty() {
            return;
        }
        slot.holders.retain(|e| e.0 != worker);
        if slot.holders.is_empty() {
            self.len -= 1;
            self.close_hole(at);
        }
    }

    /// Removes `key` with all its holders.
    #[cfg(test)]
    fn remove(&mut self, key: u64) {
        if let Some(at) = self.find(key) {
            if let Some(slot) = self.slots.get_mut(at) {
                slot.holders = Holders::new();
                self.len -= 1;
                self.close_hole(at);
            }
        }
    }

    /// Slot `hole` was just emptied: the entries after it in its run move back over it where
    /// their probe passes it, so every probe still ends at its key or at a vacancy.
    fn close_hole(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = (hole + 1) & mask;
        while let Some(next) = self.slots.get(j).filter(|s| !s.holders.is_empty()) {
            let home = self.home(next.key);
            // The entry at `j` may fill the hole if its home is not between the hole and `j`.
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.slots.swap(hole, j);
                hole = j;
            }
            j = (j + 1) & mask;
        }
    }

    /// Keeps the pages for which `keep` (which may change the holders) says so and which still
    /// have holders.
    pub fn retain(&mut self, keep: impl FnMut(&mut Holders) -> bool) {
        self.rehash_into(self.slots.len(), keep);
    }

    /// Reads the home slot of each key: their cache misses overlap here, in a loop with nothing
    /// else to wait on, rather than one after another in the work that follows.
    pub fn warm(&self, keys: impl Iterator<Item = u64>) {
        let mut seen = 0u64;
        for key in keys {
            seen ^= self.slots.get(self.home(key)).map_or(0, |s| s.key);
        }
        std::hint::black_box(seen);
    }

    /// Makes room for `pages` pages without growing again.
    pub fn reserve(&mut self, pages: usize) {
        let slots = (pages.saturating_mul(8) / 5 + 1).next_power_of_two();
        if slots > self.slots.len() {
            self.rehash_into(slots, |_| true);
        }
    }

    fn grow(&mut self) {
        self.rehash_into(2 * self.slots.len(), |_| true);
    }

    /// Moves the pages `keep` keeps (and which still have holders) into a table of `slots`.
    fn rehash_into(&mut self, slots: usize, mut keep: impl FnMut(&mut Holders) -> bool) {
        let old = std::mem::replace(self, PageTable::with_slots(slots, self.seed));
        for mut slot in old.slots.into_vec() {
            if !slot.holders.is_empty() && keep(&mut slot.holders) {
                self.insert_new(slot.key, slot.holders);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::{Rng, SeedableRng};
    use smallvec::smallvec;

    use super::*;

    /// Random inserts, removals and retains against `HashMap`. With few keys the table stays
    /// small and half full, so runs form, wrap around its end and are broken by removals.
    #[test]
    fn agrees_with_a_hash_map_through_inserts_removals_and_retains() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for (seed, keys) in [(0, 24), (12345, 24), (99, 300)] {
            let mut table = PageTable::with_slots(16, seed);
            let mut oracle: HashMap<u64, Holders> = HashMap::new();
            for step in 0..20_000 {
                let key = rng.random_range(0..keys);
                match rng.random_range(0..10) {
                    0..=4 => {
                        if let std::collections::hash_map::Entry::Vacant(e) = oracle.entry(key) {
                            let mut holders: Holders = smallvec![(WorkerId(step % 5), step)];
                            if step % 3 == 0 {
                                holders.push((WorkerId(5), step));
                            }
                            e.insert(holders.clone());
                            table.insert_new(key, holders);
                        }
                    }
                    5..=6 => {
                        table.remove(key);
                        oracle.remove(&key);
                    }
                    7..=8 => {
                        // One holder out: the page goes when it was the last.
                        let worker = WorkerId(rng.random_range(0..5));
                        if let Some(at) = table.find(key) {
                            table.remove_holder(at, worker);
                        }
                        if let Some(h) = oracle.get_mut(&key) {
                            h.retain(|e| e.0 != worker);
                            if h.is_empty() {
                                oracle.remove(&key);
                            }
                        }
                    }
                    _ => {
                        let cut = rng.random_range(0..5);
                        let keep = |h: &mut Holders| h[0].0 .0 != cut;
                        table.retain(keep);
                        oracle.retain(|_, h| keep(h));
                    }
                }
                assert_eq!(table.len(), oracle.len(), "step {step}");
                for probe in 0..keys {
                    assert_eq!(
                        table.get(probe),
                        oracle.get(&probe),
                        "step {step} key {probe}"
                    );
                }
            }
            assert!(5 * table.slots.len() >= 8 * table.len());
        }
    }

    #[test]
    fn reserve_keeps_the_pages_and_makes_room_without_growing() {
        let mut table = PageTable::with_slots(16, 3);
        for key in 0..9 {
            table.insert_new(key, smallvec![(WorkerId(1), key as u32)]);
        }
        table.reserve(1_000);
        let slots = table.slots.len();
        assert!(slots >= 1_600, "{slots}");
        table.reserve(10);
        assert_eq!(table.slots.len(), slots, "reserve never shrinks");
        for key in 9..1_000 {
            table.insert_new(key, smallvec![(WorkerId(1), key as u32)]);
        }
        assert_eq!(
            table.slots.len(),
            slots,
            "1,000 pages fit in what was reserved"
        );
        assert_eq!(table.len(), 1_000);
        for key in 0..1_000 {
            assert_eq!(table.get(key).map(|h| h[0].1), Some(key as u32));
        }
    }

    #[test]
    fn holders_change_in_place_and_empty_holders_are_not_inserted() {
        let mut table = PageTable::default();
        table.insert_new(9, Holders::new());
        assert_eq!(table.len(), 0);
        table.insert_new(9, smallvec![(WorkerId(1), 0)]);
        let at = table.find(9).unwrap();
        table.holders_mut(at).unwrap().push((WorkerId(2), 1));
        assert_eq!(table.get(9).map(|h| h.len()), Some(2));
        table.warm([9, 10].into_iter());
        assert_eq!(table.find(10), None);
    }
}
