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

    /// Walks `keys` from the first page while any slot of `start` still matches (held, or
    /// speculated until after `now`); `depth[slot]` gets the pages each slot of `start` matched.
    pub fn walk(&self, keys: &[u64], start: &SlotSet, now: u32, depth: &mut [u32]) {
        let mut alive = start.clone();
        let mut here = SlotSet::with_capacity(depth.len());
        let mut matched = 0u32;
        for key in keys {
            let Some(marks) = self.map.get(key) else {
                break;
            };
            here.clear();
            for m in marks.iter().filter(|m| m.held || live(m.n, now)) {
                here.insert(m.slot);
            }
            alive.retain_into(&here, |slot| {
                if let Some(d) = depth.get_mut(slot) {
                    *d = matched;
                }
            });
            if alive.is_empty() {
                return;
            }
            matched += 1;
        }
        alive.retain_into(&SlotSet::default(), |slot| {
            if let Some(d) = depth.get_mut(slot) {
                *d = matched;
            }
        });
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
