//! The prefix index's recency: which (page, worker) entry to evict next, by CLOCK (second
//! chance).
//!
//! Why CLOCK and not a linked LRU list: every request re-inserts all of its prompt's pages, and
//! most of them are already held. A list moves each to the newest end, which loads the entry's
//! node and both neighbours (three cache misses a page into a large slab, the later two waiting
//! on the first), 136 times for a 2,176-token prompt. Here a touch sets one bit in a bitmap of a
//! few KiB that stays in cache. Eviction pays instead, and only when the budget is full: the
//! hand sweeps the slots, clearing set bits (a second chance) and evicting the first entry whose
//! bit is clear, so an entry touched since the hand last passed outlives one that was not.
//! New entries start unreferenced in the slot the last eviction freed, just behind the hand, so
//! the pages one insert adds are next evicted in the order they went in (the index inserts a
//! prompt deepest first, so its tail goes before its shared head).

use crate::workers::WorkerId;

/// One shard's entries and their reference bits.
#[derive(Default)]
pub(super) struct Recency {
    /// Slot → (page key, worker); meaningful where `used` is set.
    slots: Vec<(u64, WorkerId)>,
    used: Bits,
    referenced: Bits,
    free: Vec<usize>,
    /// The next slot the sweep looks at.
    hand: usize,
    len: usize,
}

impl Recency {
    /// A slot for a new entry, unreferenced.
    fn alloc(&mut self, key: u64, worker: WorkerId) -> usize {
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i) {
                    *s = (key, worker);
                }
                i
            }
            None => {
                self.slots.push((key, worker));
                self.slots.len() - 1
            }
        };
        self.used.set(i, true);
        self.referenced.set(i, false);
        self.len += 1;
        i
    }

    /// [`Recency::alloc`] as the index stores a slot, a `u32`; none (and nothing allocated) past
    /// 2³² slots, which cannot happen as slots are reused and entries stay under the budget.
    pub(super) fn alloc_u32(&mut self, key: u64, worker: WorkerId) -> Option<u32> {
        let slot = self.alloc(key, worker);
        let small = u32::try_from(slot).ok();
        if small.is_none() {
            self.release(slot);
        }
        small
    }

    /// Makes room for `entries` slots without growing again.
    pub(super) fn reserve(&mut self, entries: usize) {
        self.slots.reserve(entries.saturating_sub(self.slots.len()));
        self.used.reserve(entries);
        self.referenced.reserve(entries);
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The entry in slot `i` was used again.
    #[inline]
    pub(super) fn touch(&mut self, i: usize) {
        self.referenced.set(i, true);
    }

    pub(super) fn release(&mut self, i: usize) {
        if self.used.get(i) {
            self.used.set(i, false);
            self.len -= 1;
            self.free.push(i);
        }
    }

    /// Frees the next entry the hand reaches unreferenced and returns what it was. At most two
    /// passes: the first clears every bit it meets.
    pub(super) fn evict_one(&mut self) -> Option<(u64, WorkerId)> {
        let n = self.slots.len();
        if self.len == 0 || n == 0 {
            return None;
        }
        for _ in 0..2 * n {
            let i = self.hand;
            self.hand = (i + 1) % n;
            if !self.used.get(i) {
                continue;
            }
            if self.referenced.get(i) {
                self.referenced.set(i, false);
                continue;
            }
            let entry = self.slots.get(i).copied();
            self.release(i);
            return entry;
        }
        None
    }
}

/// A growable bitmap.
#[derive(Default)]
struct Bits(Vec<u64>);

impl Bits {
    fn reserve(&mut self, bits: usize) {
        self.0
            .reserve(bits.div_ceil(64).saturating_sub(self.0.len()));
    }

    #[inline]
    fn get(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    #[inline]
    fn set(&mut self, i: usize, on: bool) {
        let word = i / 64;
        if word >= self.0.len() {
            if !on {
                return;
            }
            self.0.resize(word + 1, 0);
        }
        if let Some(w) = self.0.get_mut(word) {
            if on {
                *w |= 1 << (i % 64);
            } else {
                *w &= !(1 << (i % 64));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut Recency) -> Vec<u64> {
        std::iter::from_fn(|| r.evict_one()).map(|e| e.0).collect()
    }

    #[test]
    fn evicts_in_insertion_order_but_gives_touched_entries_a_second_chance() {
        let mut r = Recency::default();
        let a = r.alloc(1, WorkerId(0));
        r.alloc(2, WorkerId(0));
        let c = r.alloc(3, WorkerId(1));
        r.alloc(4, WorkerId(1));
        r.touch(a);
        r.touch(c);
        assert_eq!(r.evict_one(), Some((2, WorkerId(0))));
        // The freed slot is reused, unreferenced: behind the hand, it comes round after `a`, whose
        // second chance the first sweep spent.
        r.alloc(5, WorkerId(2));
        assert_eq!(drain(&mut r), vec![4, 1, 5, 3]);
        assert_eq!(r.evict_one(), None);
    }

    #[test]
    fn released_slots_are_skipped_and_reused() {
        let mut r = Recency::default();
        let a = r.alloc(1, WorkerId(0));
        r.alloc(2, WorkerId(0));
        r.release(a);
        r.release(a);
        assert_eq!(r.alloc(3, WorkerId(0)), a);
        assert_eq!(drain(&mut r), vec![3, 2]);
    }

    #[test]
    fn everything_touched_still_evicts_within_two_passes() {
        let mut r = Recency::default();
        let slots: Vec<usize> = (0..200).map(|k| r.alloc(k, WorkerId(0))).collect();
        for s in &slots {
            r.touch(*s);
        }
        assert_eq!(r.evict_one(), Some((0, WorkerId(0))));
        assert_eq!(drain(&mut r).len(), 199);
    }
}
