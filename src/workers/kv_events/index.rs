//! The exact index: which blocks each worker's engine holds, kept from its KV events.
//!
//! - **Keys.** A stored block is keyed by the gateway's own page key ([`hash_page`]) recomputed
//!   from the event's `token_ids` and its parent's key, not by the engine's hash: a request's
//!   pages are then looked up with the same cheap chained hash the approximate index uses (no
//!   SHA-256 on the request path), and a block whose parent this view never saw is detected.
//!   Each (worker, DP rank) view maps engine hash → key, for removals.
//! - **Holders.** One map entry per key ([`blocks`]) holds a mark per view holding the block
//!   and per worker speculatively credited with it, so a match costs one lookup per page. Views
//!   are numbered (slots) and a match walks the prompt's pages from the first with a bit set of
//!   the covered slots still matching, stopping at the first page none of them holds. The whole
//!   index is behind one read-write lock: a match takes it once.
//! - **Freshness.** A worker is *covered* (routed on this index instead of the approximate one)
//!   once every view of it is in sync: from `fresh_from` on. A view that lost events is cleared
//!   and given a rebuild period, during which the approximate index stands in.
//! - **Speculation.** Between routing a prompt and its `BlockStored` (its prefill), the worker
//!   is credited with the prompt's pages for [`SPECULATION_TTL`], so a burst of one prefix does
//!   not scatter; the event (or the deadline) retires the entry.
//! - **Bound.** Each view holds at most its worker's KV capacity in blocks, and all views at
//!   most `max_blocks`; a view that would pass either is inconsistent with its engine (or the
//!   cap is too small): it is cleared and marked stale, and rebuilt. Speculative credits are
//!   at most a quarter of `max_blocks` (expired ones are swept first; past the cap a prompt is
//!   not credited). So the map holds at most 1.25 × `max_blocks` marks; `benches/routing.rs`
//!   measures the bytes per indexed block.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use smallvec::SmallVec;

use super::wire::Stored;
use crate::workers::page_key::hash_page;
use crate::workers::WorkerId;

mod blocks;
mod exact_match;
mod matching;
use blocks::{Blocks, Slot, TICKS_PER_SEC};
pub use exact_match::ExactMatch;

/// How long a routed prompt counts as cached on its worker before its events arrive.
pub const SPECULATION_TTL: Duration = Duration::from_secs(3);

/// One (worker, DP rank) publisher's blocks.
struct View {
    /// Engine hash → page key, for removals.
    blocks: HashMap<i64, u64>,
    capacity_blocks: usize,
    fresh_from: Instant,
    slot: Slot,
}

/// A worker's views as a match sees them: covered from `from` on (all views in sync).
struct WorkerViews {
    id: WorkerId,
    from: Instant,
    /// Its views' slots in rank order.
    slots: SmallVec<[Slot; 2]>,
}

#[derive(Default)]
struct Inner {
    blocks: Blocks,
    views: HashMap<(WorkerId, u32), View>,
    /// Sorted by id.
    workers: Vec<WorkerViews>,
    /// Slot → the worker whose view has it; `None` when free.
    owners: Vec<Option<WorkerId>>,
    /// Freed slots and when: reused only after the speculation TTL, so a new view never
    /// inherits its predecessor's speculation.
    freed: Vec<(Slot, Instant)>,
    last_sweep: Option<u32>,
}

/// What applying a stored block did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Indexed,
    /// Already indexed (a replay overlapping live events).
    Known,
    /// Its parent is not in the view: events were lost before it.
    Orphan,
    /// The view passed its bound: cleared and stale.
    Overflow,
    /// Not a device-cache block of the index's block size; left out.
    Skipped,
}

/// One lock for the whole index: a match takes it once and walks its pages without further
/// atomics (so the CPU overlaps their cache misses); events and speculation take it to write,
/// briefly.
pub struct KvIndex {
    block_size: usize,
    max_blocks: usize,
    epoch: Instant,
    inner: RwLock<Inner>,
}

fn clear(blocks: &mut Blocks, view: &mut View) {
    let slot = view.slot;
    for (_, key) in view.blocks.drain() {
        blocks.release(key, slot);
    }
}

impl Inner {
    fn alloc_slot(&mut self, w: WorkerId, now: Instant) -> Option<Slot> {
        let reusable = self
            .freed
            .iter()
            .position(|(_, at)| now.saturating_duration_since(*at) >= SPECULATION_TTL);
        let slot = match reusable {
            Some(i) => self.freed.swap_remove(i).0,
            None => {
                let slot = Slot::try_from(self.owners.len()).ok()?;
                self.owners.push(None);
                slot
            }
        };
        if let Some(o) = self.owners.get_mut(usize::from(slot)) {
            *o = Some(w);
        }
        Some(slot)
    }

    fn update_coverage(&mut self, w: WorkerId) {
        let mut mine: SmallVec<[(u32, Slot, Instant); 2]> = self
            .views
            .iter()
            .filter(|(k, _)| k.0 == w)
            .map(|(k, v)| (k.1, v.slot, v.fresh_from))
            .collect();
        mine.sort_unstable_by_key(|e| e.0);
        let at = self.workers.binary_search_by_key(&w, |c| c.id);
        let Some(from) = mine.iter().map(|e| e.2).max() else {
            if let Ok(i) = at {
                self.workers.remove(i);
            }
            return;
        };
        let entry = WorkerViews {
            id: w,
            from,
            slots: mine.iter().map(|e| e.1).collect(),
        };
        match at {
            Ok(i) => self.workers[i] = entry,
            Err(i) => self.workers.insert(i, entry),
        }
    }
}

impl KvIndex {
    /// `block_size`: the workers' page size (blocks of another size are left out);
    /// `max_blocks`: the cap on (block, view) entries over all workers.
    pub fn new(block_size: usize, max_blocks: usize) -> KvIndex {
        KvIndex {
            block_size: block_size.max(1),
            max_blocks,
            epoch: Instant::now(),
            inner: RwLock::default(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// (block, view) entries held now.
    pub fn entries(&self) -> usize {
        self.inner.read().blocks.held
    }

    /// Speculative (block, worker) credits at most: a quarter of the cap.
    pub fn max_speculative(&self) -> usize {
        (self.max_blocks / 4).max(1)
    }

    fn tick(&self, at: Instant) -> u32 {
        let d = at.saturating_duration_since(self.epoch);
        let sub = u64::from(d.subsec_nanos()) * TICKS_PER_SEC / 1_000_000_000;
        // Truncation wraps; deadlines compare with wrapping arithmetic.
        (d.as_secs().wrapping_mul(TICKS_PER_SEC) + sub) as u32
    }

    /// Starts (or restarts) a view, empty and not yet in sync.
    pub fn open_view(&self, w: WorkerId, rank: u32, capacity_blocks: usize) {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        if !inner.views.contains_key(&(w, rank)) {
            let Some(slot) = inner.alloc_slot(w, Instant::now()) else {
                tracing::warn!(
                    worker = w.0,
                    rank,
                    "kv events: no slot left for another view"
                );
                return;
            };
            let view = View {
                blocks: HashMap::new(),
                capacity_blocks,
                fresh_from: far_future(),
                slot,
            };
            inner.views.insert((w, rank), view);
        }
        if let Some(view) = inner.views.get_mut(&(w, rank)) {
            view.capacity_blocks = capacity_blocks;
            clear(&mut inner.blocks, view);
            view.fresh_from = far_future();
        }
        inner.update_coverage(w);
    }

    /// The view is in sync with its publisher (from `at` on).
    pub fn mark_fresh(&self, w: WorkerId, rank: u32, at: Instant) {
        let mut inner = self.inner.write();
        if let Some(v) = inner.views.get_mut(&(w, rank)) {
            v.fresh_from = at;
        }
        inner.update_coverage(w);
    }

    /// Events were lost: forget the view's blocks and rebuild for `rebuild` before routing on it.
    pub fn mark_stale(&self, w: WorkerId, rank: u32, rebuild: Duration) {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        if let Some(v) = inner.views.get_mut(&(w, rank)) {
            clear(&mut inner.blocks, v);
            v.fresh_from = Instant::now() + rebuild;
        }
        inner.update_coverage(w);
    }

    /// `AllBlocksCleared`, or a publisher restart (a new engine starts empty).
    pub fn clear_view(&self, w: WorkerId, rank: u32) {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        if let Some(v) = inner.views.get_mut(&(w, rank)) {
            clear(&mut inner.blocks, v);
        }
    }

    /// The worker left: every view of it goes.
    pub fn drop_worker(&self, w: WorkerId) {
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        let now = Instant::now();
        let ranks: Vec<(WorkerId, u32)> =
            inner.views.keys().filter(|k| k.0 == w).copied().collect();
        for k in ranks {
            if let Some(mut v) = inner.views.remove(&k) {
                clear(&mut inner.blocks, &mut v);
                if let Some(o) = inner.owners.get_mut(usize::from(v.slot)) {
                    *o = None;
                }
                inner.freed.push((v.slot, now));
            }
        }
        inner.update_coverage(w);
    }

    /// Workers with a view, and whether each is covered now.
    pub fn workers(&self) -> Vec<(WorkerId, bool)> {
        let now = Instant::now();
        self.inner
            .read()
            .workers
            .iter()
            .map(|c| (c.id, c.from <= now))
            .collect()
    }

    /// Blocks held per view, summed per worker.
    pub fn blocks_per_worker(&self) -> Vec<(WorkerId, usize)> {
        let mut out: HashMap<WorkerId, usize> = HashMap::new();
        for ((w, _), v) in self.inner.read().views.iter() {
            *out.entry(*w).or_default() += v.blocks.len();
        }
        out.into_iter().collect()
    }

    /// One `BlockStored` event: its pages, each chained onto the one before.
    pub fn store(&self, w: WorkerId, rank: u32, ev: &Stored) -> Applied {
        if ev.block_size != self.block_size || !ev.device_tier {
            return Applied::Skipped;
        }
        let mut guard = self.inner.write();
        let Inner {
            blocks,
            views,
            owners,
            ..
        } = &mut *guard;
        let Some(view) = views.get_mut(&(w, rank)) else {
            return Applied::Skipped;
        };
        let mut parent = match ev.parent {
            None => None,
            Some(p) => match view.blocks.get(&p) {
                Some(k) => Some(*k),
                None => return Applied::Orphan,
            },
        };
        let same_worker = |s: Slot| owners.get(usize::from(s)).copied().flatten() == Some(w);
        let mut outcome = Applied::Known;
        for (hash, page) in ev
            .hashes
            .iter()
            .zip(ev.token_ids.chunks_exact(ev.block_size))
        {
            let key = hash_page(parent, page);
            parent = Some(key);
            if view.blocks.insert(*hash, key).is_some() {
                continue;
            }
            if view.blocks.len() > view.capacity_blocks || blocks.held >= self.max_blocks {
                view.blocks.remove(hash);
                clear(blocks, view);
                return Applied::Overflow;
            }
            // The event retires the worker's speculation on this block.
            blocks.hold(key, view.slot, same_worker);
            outcome = Applied::Indexed;
        }
        outcome
    }

    /// One `BlockRemoved` event; unknown hashes (never indexed) are ignored.
    pub fn remove(&self, w: WorkerId, rank: u32, hashes: &[i64]) {
        let mut guard = self.inner.write();
        let Inner { blocks, views, .. } = &mut *guard;
        let Some(view) = views.get_mut(&(w, rank)) else {
            return;
        };
        for h in hashes {
            if let Some(key) = view.blocks.remove(h) {
                blocks.release(key, view.slot);
            }
        }
    }

    #[cfg(test)]
    fn distinct_keys(&self) -> usize {
        self.inner.read().blocks.keys()
    }
}

/// The page keys of every whole block of `tokens`.
pub fn page_keys(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut prev = None;
    tokens
        .chunks_exact(block_size.max(1))
        .map(|page| {
            let h = hash_page(prev, page);
            prev = Some(h);
            h
        })
        .collect()
}

/// "Not in sync yet": later than any real deadline.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

#[cfg(test)]
mod tests;
