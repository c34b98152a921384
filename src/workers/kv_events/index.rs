//! The exact index: which blocks each worker's engine holds, kept from its KV events.
//!
//! - **Keys.** A stored block is keyed by the gateway's own page key ([`hash_page`]) recomputed
//!   from the event's `token_ids` and its parent's key, not by the engine's hash: a request's
//!   pages are then looked up with the same cheap chained hash the approximate index uses (no
//!   SHA-256 on the request path), and a block whose parent this view never saw is detected.
//!   Each (worker, DP rank) view maps engine hash → key, for removals.
//! - **Holders.** Key → the workers holding it (a count per worker: DP ranks may hold the same
//!   block), in `SHARDS` mutex-guarded shards, matched like the approximate index: consecutive
//!   pages from the first.
//! - **Freshness.** A worker is *covered* (routed on this index instead of the approximate one)
//!   once every view of it is in sync: from `fresh_from` on. A view that lost events is cleared
//!   and given a rebuild period, during which the approximate index stands in.
//! - **Speculation.** Between routing a prompt and its `BlockStored` (its prefill), the worker
//!   is credited with the prompt's pages for [`SPECULATION_TTL`], so a burst of one prefix does
//!   not scatter; the event (or the deadline) retires the entry.
//! - **Bound.** Each view holds at most its worker's KV capacity in blocks, and all views at
//!   most `max_blocks`; a view that would pass either is inconsistent with its engine (or the
//!   cap is too small): it is cleared and marked stale, and rebuilt.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::wire::Stored;
use crate::workers::page_key::{hash_page, PassThrough};
use crate::workers::WorkerId;

const SHARDS: usize = 32;
/// How long a routed prompt counts as cached on its worker before its events arrive.
pub const SPECULATION_TTL: Duration = Duration::from_secs(3);

type Holders = SmallVec<[(WorkerId, u32); 2]>;
type Speculated = SmallVec<[(WorkerId, Instant); 2]>;
type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<PassThrough>>;

#[derive(Default)]
struct Shard {
    holders: KeyMap<Holders>,
    speculated: KeyMap<Speculated>,
}

/// One (worker, DP rank) publisher's blocks.
struct View {
    blocks: HashMap<i64, u64>,
    capacity_blocks: usize,
    fresh_from: Instant,
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

pub struct KvIndex {
    block_size: usize,
    max_blocks: usize,
    entries: AtomicUsize,
    shards: Box<[Mutex<Shard>]>,
    views: Mutex<HashMap<(WorkerId, u32), View>>,
    /// Per worker: when all its views are in sync (the latest `fresh_from`); read per pick.
    coverage: Mutex<HashMap<WorkerId, Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A prompt matched against the index: cached tokens per covered worker.
#[derive(Debug, Default)]
pub struct ExactMatch {
    covered: SmallVec<[WorkerId; 8]>,
    pages: Vec<(WorkerId, usize)>,
    block_size: usize,
    keys: Vec<u64>,
}

impl ExactMatch {
    /// Cached tokens on `w`, or `None` when `w` is not covered (use the approximate index).
    pub fn cached_tokens(&self, w: WorkerId) -> Option<usize> {
        self.covered.contains(&w).then(|| {
            self.pages
                .iter()
                .find(|e| e.0 == w)
                .map_or(0, |e| e.1 * self.block_size)
        })
    }
}

impl KvIndex {
    /// `block_size`: the workers' page size (blocks of another size are left out);
    /// `max_blocks`: the cap on (block, view) entries over all workers.
    pub fn new(block_size: usize, max_blocks: usize) -> KvIndex {
        KvIndex {
            block_size: block_size.max(1),
            max_blocks,
            entries: AtomicUsize::new(0),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            views: Mutex::default(),
            coverage: Mutex::default(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// (block, view) entries held now.
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Shard> {
        lock(&self.shards[(key >> 32) as usize % SHARDS])
    }

    /// Starts (or restarts) a view, empty and not yet in sync.
    pub fn open_view(&self, w: WorkerId, rank: u32, capacity_blocks: usize) {
        let mut views = lock(&self.views);
        let view = views.entry((w, rank)).or_insert_with(|| View {
            blocks: HashMap::new(),
            capacity_blocks,
            fresh_from: far_future(),
        });
        view.capacity_blocks = capacity_blocks;
        self.clear(w, view);
        view.fresh_from = far_future();
        self.update_coverage(w, &views);
    }

    /// The view is in sync with its publisher (from `at` on).
    pub fn mark_fresh(&self, w: WorkerId, rank: u32, at: Instant) {
        let mut views = lock(&self.views);
        if let Some(v) = views.get_mut(&(w, rank)) {
            v.fresh_from = at;
        }
        self.update_coverage(w, &views);
    }

    /// Events were lost: forget the view's blocks and rebuild for `rebuild` before routing on it.
    pub fn mark_stale(&self, w: WorkerId, rank: u32, rebuild: Duration) {
        let mut views = lock(&self.views);
        if let Some(v) = views.get_mut(&(w, rank)) {
            self.clear(w, v);
            v.fresh_from = Instant::now() + rebuild;
        }
        self.update_coverage(w, &views);
    }

    /// `AllBlocksCleared`, or a publisher restart (a new engine starts empty).
    pub fn clear_view(&self, w: WorkerId, rank: u32) {
        let mut views = lock(&self.views);
        if let Some(v) = views.get_mut(&(w, rank)) {
            self.clear(w, v);
        }
    }

    /// The worker left: every view of it goes.
    pub fn drop_worker(&self, w: WorkerId) {
        let mut views = lock(&self.views);
        let ranks: Vec<(WorkerId, u32)> = views.keys().filter(|k| k.0 == w).copied().collect();
        for k in ranks {
            if let Some(mut v) = views.remove(&k) {
                self.clear(w, &mut v);
            }
        }
        lock(&self.coverage).remove(&w);
    }

    /// Workers with a view, and whether each is covered now.
    pub fn workers(&self) -> Vec<(WorkerId, bool)> {
        let now = Instant::now();
        lock(&self.coverage)
            .iter()
            .map(|(w, from)| (*w, *from <= now))
            .collect()
    }

    /// Blocks held per view, summed per worker.
    pub fn blocks_per_worker(&self) -> Vec<(WorkerId, usize)> {
        let mut out: HashMap<WorkerId, usize> = HashMap::new();
        for ((w, _), v) in lock(&self.views).iter() {
            *out.entry(*w).or_default() += v.blocks.len();
        }
        out.into_iter().collect()
    }

    fn update_coverage(&self, w: WorkerId, views: &HashMap<(WorkerId, u32), View>) {
        let latest = views
            .iter()
            .filter(|(k, _)| k.0 == w)
            .map(|(_, v)| v.fresh_from)
            .max();
        let mut coverage = lock(&self.coverage);
        match latest {
            Some(t) => coverage.insert(w, t),
            None => coverage.remove(&w),
        };
    }

    fn clear(&self, w: WorkerId, view: &mut View) {
        for (_, key) in view.blocks.drain() {
            self.release(key, w);
        }
    }

    fn release(&self, key: u64, w: WorkerId) {
        let mut shard = self.shard(key);
        if let Some(holders) = shard.holders.get_mut(&key) {
            if let Some(i) = holders.iter().position(|h| h.0 == w) {
                holders[i].1 -= 1;
                if holders[i].1 == 0 {
                    holders.remove(i);
                }
                self.entries.fetch_sub(1, Ordering::Relaxed);
            }
            if holders.is_empty() {
                shard.holders.remove(&key);
            }
        }
    }

    /// One `BlockStored` event: its pages, each chained onto the one before.
    pub fn store(&self, w: WorkerId, rank: u32, ev: &Stored) -> Applied {
        if ev.block_size != self.block_size || !ev.device_tier {
            return Applied::Skipped;
        }
        let mut views = lock(&self.views);
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
            let total = self.entries.fetch_add(1, Ordering::Relaxed) + 1;
            if view.blocks.len() > view.capacity_blocks || total > self.max_blocks {
                self.entries.fetch_sub(1, Ordering::Relaxed);
                view.blocks.remove(hash);
                self.clear(w, view);
                return Applied::Overflow;
            }
            let mut shard = self.shard(key);
            let holders = shard.holders.entry(key).or_default();
            match holders.iter_mut().find(|h| h.0 == w) {
                Some(h) => h.1 += 1,
                None => holders.push((w, 1)),
            }
            if let Some(s) = shard.speculated.get_mut(&key) {
                s.retain(|e| e.0 != w);
            }
            outcome = Applied::Indexed;
        }
        outcome
    }

    /// One `BlockRemoved` event; unknown hashes (never indexed) are ignored.
    pub fn remove(&self, w: WorkerId, rank: u32, hashes: &[i64]) {
        let mut views = lock(&self.views);
        let Some(view) = views.get_mut(&(w, rank)) else {
            return;
        };
        for h in hashes {
            if let Some(key) = view.blocks.remove(h) {
                self.release(key, w);
            }
        }
    }

    /// Matches a prompt; `keys` are its page keys when the caller already hashed it with this
    /// block size. `None` when no worker is covered.
    pub fn lookup(&self, prompt: &[u32], keys: Option<&[u64]>) -> Option<ExactMatch> {
        let now = Instant::now();
        let covered: SmallVec<[WorkerId; 8]> = lock(&self.coverage)
            .iter()
            .filter(|(_, from)| **from <= now)
            .map(|(w, _)| *w)
            .collect();
        if covered.is_empty() {
            return None;
        }
        let keys = match keys {
            Some(k) => k.to_vec(),
            None => page_keys(prompt, self.block_size),
        };
        let mut pages: Vec<(WorkerId, usize)> = Vec::new();
        for (depth, key) in keys.iter().enumerate() {
            let mut here: SmallVec<[WorkerId; 8]> = SmallVec::new();
            {
                let shard = self.shard(*key);
                if let Some(h) = shard.holders.get(key) {
                    here.extend(h.iter().map(|e| e.0));
                }
                if let Some(s) = shard.speculated.get(key) {
                    here.extend(s.iter().filter(|e| e.1 > now).map(|e| e.0));
                }
            }
            if depth == 0 {
                here.sort_unstable();
                here.dedup();
                pages.extend(here.iter().map(|w| (*w, 1)));
            } else {
                let mut alive = false;
                for e in pages.iter_mut().filter(|e| e.1 == depth) {
                    if here.contains(&e.0) {
                        e.1 += 1;
                        alive = true;
                    }
                }
                if !alive {
                    break;
                }
            }
            if pages.is_empty() {
                break;
            }
        }
        Some(ExactMatch {
            covered,
            pages,
            block_size: self.block_size,
            keys,
        })
    }

    /// Credits `w` with the matched prompt's pages until its events arrive (or the TTL ends).
    pub fn speculate(&self, m: &ExactMatch, w: WorkerId) {
        if !m.covered.contains(&w) {
            return;
        }
        let until = Instant::now() + SPECULATION_TTL;
        // The speculative entries stay within the index's cap: expired ones are dropped first.
        let per_shard = (self.max_blocks / SHARDS).max(1);
        for key in &m.keys {
            let mut shard = self.shard(*key);
            if shard
                .holders
                .get(key)
                .is_some_and(|h| h.iter().any(|e| e.0 == w))
            {
                continue;
            }
            if shard.speculated.len() >= per_shard {
                let now = Instant::now();
                shard.speculated.retain(|_, s| {
                    s.retain(|e| e.1 > now);
                    !s.is_empty()
                });
                if shard.speculated.len() >= per_shard {
                    continue;
                }
            }
            let s = shard.speculated.entry(*key).or_default();
            match s.iter_mut().find(|e| e.0 == w) {
                Some(e) => e.1 = until,
                None => s.push((w, until)),
            }
        }
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
