//! Matching a prompt against the index, and crediting the worker it is routed to until its
//! events arrive (speculation).

use std::time::Instant;

use smallvec::SmallVec;

use super::blocks::{Slot, SlotSet, TICKS_PER_SEC};
use super::{page_keys, ExactMatch, KvIndex, SPECULATION_TTL};
use crate::workers::WorkerId;

impl KvIndex {
    /// Matches a prompt; `keys` are its page keys when the caller already hashed it with this
    /// block size. `None` when no worker is covered.
    pub fn lookup(&self, prompt: &[u32], keys: Option<&[u64]>) -> Option<ExactMatch> {
        let keys = match keys {
            Some(k) => k.to_vec(),
            None => page_keys(prompt, self.block_size),
        };
        let now = Instant::now();
        let inner = self.inner.read();
        let slots = inner.owners.len();
        let mut start = SlotSet::with_capacity(slots);
        let covered = || inner.workers.iter().filter(|c| c.from <= now);
        for c in covered() {
            c.slots.iter().for_each(|s| start.insert(*s));
        }
        let mut depth: SmallVec<[u32; 64]> = SmallVec::from_elem(0, slots);
        inner.blocks.walk(&keys, &start, self.tick(now), &mut depth);
        // A worker with several DP ranks gets its best rank's match: a request lands on one.
        let pages: SmallVec<[(WorkerId, u32, Slot); 8]> = covered()
            .map(|c| {
                let best = c
                    .slots
                    .iter()
                    .filter_map(|s| Some((*depth.get(usize::from(*s))?, *s)))
                    .max_by_key(|e| e.0);
                let (pages, slot) = best.unwrap_or((0, 0));
                (c.id, pages, slot)
            })
            .collect();
        // Under the same lock: each covered worker's free KV (its views' capacities less the
        // blocks they hold; an unknown capacity counts as unbounded).
        let mut free_blocks: SmallVec<[usize; 8]> = SmallVec::from_elem(0, pages.len());
        for ((w, _), v) in &inner.views {
            if let Ok(i) = pages.binary_search_by_key(w, |e| e.0) {
                let free = v.capacity_blocks.saturating_sub(v.blocks.len());
                if let Some(f) = free_blocks.get_mut(i) {
                    *f = f.saturating_add(free);
                }
            }
        }
        (!pages.is_empty()).then(|| ExactMatch {
            pages,
            free_blocks,
            block_size: self.block_size,
            keys,
        })
    }

    /// Credits `w` with the matched prompt's pages it lacks until their events arrive (or the
    /// TTL ends), on the view that matched the most: that view then matches the whole prompt.
    /// Pages it already matched are left as they are (no refresh): touching every page of every
    /// routed prompt would cost a cache miss per page.
    pub fn speculate(&self, m: &ExactMatch, w: WorkerId) {
        let Some(&(_, matched, slot)) = m
            .pages
            .binary_search_by_key(&w, |e| e.0)
            .ok()
            .and_then(|i| m.pages.get(i))
        else {
            return;
        };
        let now = Instant::now();
        let (tick, deadline) = (self.tick(now), self.tick(now + SPECULATION_TTL));
        let cap = self.max_speculative();
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        if inner.owners.get(usize::from(slot)).copied().flatten() != Some(w) {
            return; // its view went since the match
        }
        // At the cap, expired marks go first (a full sweep, at most once per TTL).
        let ttl_ticks = (SPECULATION_TTL.as_secs() * TICKS_PER_SEC) as u32;
        if inner.blocks.speculative >= cap
            && inner
                .last_sweep
                .is_none_or(|t| tick.wrapping_sub(t) >= ttl_ticks)
        {
            inner.blocks.sweep(tick);
            inner.last_sweep = Some(tick);
        }
        // In page order, stopping at the cap: a credited prefix stays a prefix.
        for key in m.keys.iter().skip(matched as usize) {
            if !inner.blocks.speculate(*key, slot, deadline, tick, cap) {
                break;
            }
        }
    }

    /// Speculative credits held now (live or expired, until swept).
    pub fn speculative(&self) -> usize {
        self.inner.read().blocks.speculative
    }
}
