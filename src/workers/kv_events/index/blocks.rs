//! The index's one map: page key → marks, one per view holding the block and one per worker
//! speculatively credited with it. One map entry per block keeps a prompt's match at one
//! lookup per page (a miss in a million-entry map costs ~100 ns), and the entry is 32 bytes:
//! two marks inline, a `SmallVec` spill beyond.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use smallvec::SmallVec;

use crate::workers::page_key::PassThrough;

/// A view's place in the bit sets a match walks with.
pub(super) type Slot = u16;

/// Speculation deadlines are 1/64 s ticks since the index started, compared with wrapping
/// arithmetic (valid for deadlines within a year of now; sweeps drop expired marks long before).
pub(super) const TICKS_PER_SEC: u64 = 64;

#[derive(Debug, Clone, Copy)]
struct Mark {
    slot: Slot,
    held: bool,
    /// Held: how many of the view's engine hashes map to this key (normally 1).
    /// Speculative: the deadline tick.
    n: u32,
}

fn live(deadline: u32, now: u32) -> bool {
    (deadline.wrapping_sub(now) as i32) > 0
}

type Marks = SmallVec<[Mark; 2]>;

#[derive(Default)]
pub(super) struct Blocks {
    map: HashMap<u64, Marks, BuildHasherDefault<PassThrough>>,
    /// Held marks, counted with multiplicity: the (block, view) entries.
    pub held: usize,
    /// Speculative marks, live or expired (dropped when touched, or by `sweep`).
    pub speculative: usize,
}

impl Blocks {
    /// `slot` holds `key`; speculative marks of slots `retire` accepts (the same worker's) go.
    pub fn hold(&mut self, key: u64, slot: Slot, retire: impl Fn(Slot) -> bool) {
        let marks = self.map.entry(key).or_default();
        let before = marks.len();
        marks.retain(|m| m.held || !retire(m.slot));
        self.speculative -= before - marks.len();
        match marks.iter_mut().find(|m| m.held && m.slot == slot) {
            Some(m) => m.n += 1,
            None => marks.push(Mark {
                slot,
                held: true,
                n: 1,
            }),
        }
        self.held += 1;
    }

    /// Undoes one `hold`.
    pub fn release(&mut self, key: u64, slot: Slot) {
        let Some(marks) = self.map.get_mut(&key) else {
            return;
        };
        if let Some(i) = marks.iter().position(|m| m.held && m.slot == slot) {
            marks[i].n -= 1;
            if marks[i].n == 0 {
                marks.swap_remove(i);
            }
            self.held -= 1;
        }
        if marks.is_empty() {
            self.map.remove(&key);
        }
    }

    /// Credits `slot` with `key` until `deadline`, unless it holds it. False when at `cap`
    /// speculative marks.
    pub fn speculate(&mut self, key: u64, slot: Slot, deadline: u32, now: u32, cap: usize) -> bool {
        let marks = self.map.entry(key).or_default();
        let before = marks.len();
        marks.retain(|m| m.held || live(m.n, now));
        self.speculative -= before - marks.len();
        if let Some(m) = marks.iter_mut().find(|m| m.slot == slot) {
            if !m.held {
                m.n = deadline;
            }
            return true;
        }
        if self.speculative >= cap {
            if marks.is_empty() {
                self.map.remove(&key);
            }
            return false;
        }
        marks.push(Mark {
            slot,
            held: false,
            n: deadline,
        });
        self.speculative += 1;
        true
    }

    /// Drops every expired speculative mark: O(map), run only when the cap is reached.
    pub fn sweep(&mut self, now: u32) {
        let mut speculative = 0;
        self.map.retain(|_, marks| {
            marks.retain(|m| m.held || live(m.n, now));
            speculative += marks.iter().filter(|m| !m.held).count();
            !marks.is_empty()
        });
        self.speculative = speculative;
    }

    /// Distinct keys held or speculated.
    #[cfg(test)]
    pub fn keys(&self) -> usize {
        self.map.len()
    }

    /// The slots matching page `key` (held, or speculated until after `now`) into `out`.
    fn slots_at(&self, key: u64, now: u32, out: &mut SlotSet) {
        out.clear();
        if let Some(marks) = self.map.get(&key) {
            for m in marks.iter().filter(|m| m.held || live(m.n, now)) {
                out.insert(m.slot);
            }
        }
    }

    /// How many pages of `keys`, from the first, each slot of `start` matches, into
    /// `depth[slot]`. A view's blocks are prefix-closed (a radix cache evicts leaves first, and
    /// speculation credits whole prefixes), so the pages a set of slots all match form a prefix:
    /// found by galloping then bisecting, O(log pages) lookups per depth at which some slot
    /// drops out, instead of one lookup (a cache miss in a large map) per page.
    pub fn walk(&self, keys: &[u64], start: &SlotSet, now: u32, depth: &mut [u32]) {
        let mut alive = start.clone();
        let mut here = SlotSet::with_capacity(depth.len());
        let mut record = |slot: usize, d: usize| {
            if let Some(x) = depth.get_mut(slot) {
                *x = u32::try_from(d).unwrap_or(u32::MAX);
            }
        };
        // Every slot in `alive` matches pages [0, matched).
        let mut matched = 0;
        while matched < keys.len() && !alive.is_empty() {
            let all_match = |page: usize, here: &mut SlotSet| {
                keys.get(page).is_some_and(|k| {
                    self.slots_at(*k, now, here);
                    alive.is_subset(here)
                })
            };
            if all_match(matched, &mut here) {
                // Gallop to a page not all match (or the end), then bisect: `good` all match.
                let (mut good, mut step) = (matched, 1);
                let mut bad = loop {
                    let probe = good + step;
                    if probe >= keys.len() {
                        break keys.len();
                    }
                    if !all_match(probe, &mut here) {
                        break probe;
                    }
                    good = probe;
                    step *= 2;
                };
                while bad - good > 1 {
                    let mid = good + (bad - good) / 2;
                    if all_match(mid, &mut here) {
                        good = mid;
                    } else {
                        bad = mid;
                    }
                }
                matched = good + 1;
                continue;
            }
            // Some slots end here; the rest go on from this page.
            if let Some(k) = keys.get(matched) {
                self.slots_at(*k, now, &mut here);
            }
            alive.retain_into(&here, |slot| record(slot, matched));
        }
        alive.retain_into(&SlotSet::default(), |slot| record(slot, matched));
    }
}

/// A set of slots, one bit each: one word up to 64 views, inline.
#[derive(Debug, Clone, Default)]
pub(super) struct SlotSet(SmallVec<[u64; 1]>);

impl SlotSet {
    pub fn with_capacity(slots: usize) -> SlotSet {
        SlotSet(SmallVec::from_elem(0, slots.div_ceil(64)))
    }

    pub fn insert(&mut self, slot: Slot) {
        let slot = usize::from(slot);
        if let Some(w) = self.0.get_mut(slot / 64) {
            *w |= 1 << (slot % 64);
        }
    }

    fn is_subset(&self, of: &SlotSet) -> bool {
        self.0
            .iter()
            .enumerate()
            .all(|(i, w)| *w & !of.0.get(i).copied().unwrap_or(0) == 0)
    }

    fn clear(&mut self) {
        self.0.iter_mut().for_each(|w| *w = 0);
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// Keeps the slots also in `other`; calls `dropped` with each slot removed.
    fn retain_into(&mut self, other: &SlotSet, mut dropped: impl FnMut(usize)) {
        for (i, w) in self.0.iter_mut().enumerate() {
            let keep = *w & other.0.get(i).copied().unwrap_or(0);
            let mut gone = *w & !keep;
            while gone != 0 {
                dropped(i * 64 + gone.trailing_zeros() as usize);
                gone &= gone - 1;
            }
            *w = keep;
        }
    }
}
