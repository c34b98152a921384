//! One shard of the prefix index: its pages and their recency, under one lock.

use smallvec::{smallvec, SmallVec};

use crate::routing::page_table::PageTable;
use crate::routing::recency::Recency;
use crate::workers::WorkerId;

/// Entries evicted per batch: enough misses in flight to fill the core's miss buffers.
pub(super) const EVICT_BATCH: usize = 32;

#[derive(Default)]
pub(super) struct Shard {
    /// Page key → the workers holding it, sorted by id, each with its recency slot (a `u32`,
    /// so that a slot of the table is 32 bytes and a lookup touches one cache line).
    pub(super) pages: PageTable,
    /// Also counts the entries.
    pub(super) recency: Recency,
}

impl Shard {
    /// Room for `entries` entries, so that a filling index does not rehash and copy its
    /// tables (and fault in fresh pages for each copy) as it grows.
    pub(super) fn reserve(&mut self, entries: usize) {
        self.pages.reserve(entries);
        self.recency.reserve(entries);
    }

    /// `worker` holds page `key`: a new entry, or the old one marked as used again.
    pub(super) fn touch(&mut self, key: u64, worker: WorkerId) {
        let Some(at) = self.pages.find(key) else {
            if let Some(s) = self.recency.alloc_u32(key, worker) {
                self.pages.insert_new(key, smallvec![(worker, s)]);
            }
            return;
        };
        let Some(holders) = self.pages.holders_mut(at) else {
            return;
        };
        match holders.binary_search_by_key(&worker, |e| e.0) {
            Ok(i) => {
                if let Some(e) = holders.get(i) {
                    self.recency.touch(e.1 as usize);
                }
            }
            Err(i) => {
                if let Some(s) = self.recency.alloc_u32(key, worker) {
                    holders.insert(i, (worker, s));
                }
            }
        }
    }

    /// Evicts down to `target` entries, a batch at a time: the sweep picks a batch of victims,
    /// their pages' slots are read ahead together (`PageTable::warm`), then each is removed.
    pub(super) fn evict_to(&mut self, target: usize) {
        let mut victims: SmallVec<[(u64, WorkerId); EVICT_BATCH]> = SmallVec::new();
        loop {
            victims.clear();
            while victims.len() < EVICT_BATCH && self.recency.len() > target {
                match self.recency.evict_one() {
                    Some(victim) => victims.push(victim),
                    None => break,
                }
            }
            if victims.is_empty() {
                return;
            }
            self.pages.warm(victims.iter().map(|v| v.0));
            for &(key, worker) in &victims {
                if let Some(at) = self.pages.find(key) {
                    self.pages.remove_holder(at, worker);
                }
            }
        }
    }

    pub(super) fn retain_workers(&mut self, keep: &dyn Fn(WorkerId) -> bool) {
        let recency = &mut self.recency;
        self.pages.retain(|holders| {
            holders.retain(|e| {
                let kept = keep(e.0);
                if !kept {
                    recency.release(e.1 as usize);
                }
                kept
            });
            !holders.is_empty()
        });
    }
}
