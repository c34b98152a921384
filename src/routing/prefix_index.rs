//! Which workers likely hold how many leading tokens of a prompt.
//!
//! The gateway cannot see the engines' radix caches, so this records routing history instead:
//! when a policy sends a prompt to a worker it inserts that prompt for that worker, on the bet
//! that the engine will keep it cached for a while. SMG's `cache_aware` tree, Dynamo's
//! `--no-router-kv-events` mode and llm-d's approximate prefix producer all work this way.
//!
//! Layout, and why:
//! - **Pages, not tokens.** A prompt is cut into `page_size`-token pages (SGLang's `--page-size`
//!   and SMG's `--block-size`, 16 by default) and the partial last page is ignored, as an engine
//!   with paged KV cannot reuse it either. Memory is one map entry per page, not per token.
//! - **Chained hashes.** Page `k`'s key hashes its tokens together with page `k-1`'s key, so a
//!   key stands for the whole prefix up to that page and a flat hash map replaces a radix tree.
//! - **Matching by bisection.** A prompt matches a worker up to the deepest of its pages the
//!   worker holds, taking what a worker holds of one prompt to be a prefix of its pages: an
//!   engine's radix cache evicts leaves before the nodes above them, and here a prompt's pages
//!   go in deepest first, so its head outlives its tail. A match therefore bisects the pages,
//!   splitting the workers at each probe: about log2(pages) lookups per distinct match length
//!   (10 for a 2,176-token prompt, where a walk made 136, each a cache miss into a large map).
//!   The shards' separate recency can leave a hole in a prefix here; the match then counts
//!   the pages past it too, which the engine, holding the deeper page, holds as well.
//! - **Shards.** Every request matches and inserts, from many tasks at once, so the map is split
//!   into `SHARDS` mutex-guarded shards picked by key. An insert takes each shard's lock
//!   once for all of the prompt's pages in it, not once per page: a lock and its release are
//!   atomic read-modify-writes that wait for every earlier load, so a lock per page made the
//!   pages' cache misses into the map one after another; grouped, the
//!   misses within a shard overlap (`benches/routing.rs`; docs/benchmarks.md has the figures).
//!   The map is a `page_table`, whose slots can be read ahead by key: an insert reads its
//!   pages' slots in one loop first, and eviction goes in batches whose slots are read the
//!   same way, so a stream of unique prompts (every page new, each pushing out an old one)
//!   waits on overlapping misses rather than on one miss after another.
//! - **Budget.** `max_tokens` bounds the (page, worker) entries × `page_size`, split evenly over
//!   the shards. Each shard evicts by CLOCK (`recency`): entries not inserted again since the
//!   sweep last passed go first. A prompt's pages are inserted deepest first, so within one
//!   prompt the tail ages out before the shared head, like leaves before inner nodes in a
//!   radix tree.

use std::sync::{Mutex, MutexGuard};

use smallvec::SmallVec;

pub use crate::workers::page_key::{hash_page, mix64};
use crate::workers::WorkerId;
use shard::{Shard, EVICT_BATCH};

/// Enough shards that 2 to 64 request tasks rarely meet on one lock.
const SHARDS: usize = 32;

/// How big the index is right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexSize {
    /// Distinct prefix pages.
    pub pages: usize,
    /// (page, worker) pairs: a page held by three workers counts three times.
    pub entries: usize,
    /// `entries × page_size`: the figure the token budget bounds.
    pub tokens: usize,
}

pub struct PrefixIndex {
    page_size: usize,
    /// Entries each shard may hold.
    shard_budget: usize,
    /// Inline eviction starts above this many entries per shard: the budget itself, or twice
    /// it when a periodic sweep (`evict`) is the primary mechanism, as in SMG.
    shard_ceiling: usize,
    /// Where eviction during an insert stops: a little under the budget, so that it runs in
    /// batches every so many new entries (`Shard::evict_to`), not one entry per new one.
    shard_low_water: usize,
    shards: Box<[Mutex<Shard>]>,
}

/// A shard's tables are sized up front for at most this many entries (512 KiB of pages and
/// 160 KiB of recency, 21 MiB for all shards: the default budget's share, 8,193 entries, fits),
/// so that a filling index does not rehash its way up; a larger budget grows past it on demand.
const UP_FRONT_ENTRIES: usize = 10_000;

impl PrefixIndex {
    /// `max_tokens` bounds the stored (page, worker) entries × `page_size`.
    pub fn new(page_size: usize, max_tokens: usize) -> PrefixIndex {
        let page_size = page_size.max(1);
        // Recency slots are `u32`s: the ceiling (twice the budget) stays below 2³².
        let shard_budget = (max_tokens / page_size / SHARDS).clamp(1, u32::MAX as usize / 4);
        PrefixIndex {
            page_size,
            shard_budget,
            shard_ceiling: shard_budget,
            shard_low_water: shard_budget - (shard_budget / 64).clamp(1, EVICT_BATCH) + 1,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Lets the index grow to twice its budget between `evict()` sweeps (SMG's eviction
    /// interval), still bounding memory if sweeps stop.
    pub fn with_periodic_eviction(mut self) -> PrefixIndex {
        self.shard_ceiling = self.shard_budget.saturating_mul(2);
        self
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The token budget as rounded to whole pages per shard.
    pub fn budget_tokens(&self) -> usize {
        self.shard_budget * SHARDS * self.page_size
    }

    /// Each shard holding some of `hashes`, locked, with the positions of those it holds (in page
    /// order).
    fn by_shard<'a>(
        &'a self,
        order: &'a ShardOrder,
    ) -> impl Iterator<Item = (MutexGuard<'a, Shard>, &'a [usize])> + 'a {
        self.shards
            .iter()
            .enumerate()
            .map(|(i, m)| (m, order.pages_in(i)))
            .filter(|(_, pages)| !pages.is_empty())
            .map(|(m, pages)| (m.lock().unwrap_or_else(|e| e.into_inner()), pages))
    }

    /// The chained key of every full page of `tokens`.
    pub fn page_hashes(&self, tokens: &[u32]) -> Vec<u64> {
        let mut prev = None;
        tokens
            .chunks_exact(self.page_size)
            .map(|page| {
                let h = hash_page(prev, page);
                prev = Some(h);
                h
            })
            .collect()
    }

    /// Matched leading pages per worker (workers matching none are absent), sorted by worker.
    ///
    /// A worker's match ends at the deepest page it holds, found by bisection over the prompt's
    /// pages (see the module's comment): about `log2(pages)` lookups per distinct match length,
    /// where a page-by-page walk made one per page.
    pub fn match_pages(&self, hashes: &[u64]) -> Vec<(WorkerId, usize)> {
        let (Some(&first), Some(&last)) = (hashes.first(), hashes.last()) else {
            return Vec::new();
        };
        let holding_first = self.holders_of(first);
        let mut out = Vec::with_capacity(holding_first.len());
        // Holders of the last page hold all of them; the others end in between.
        let whole = if hashes.len() == 1 {
            holding_first.clone()
        } else {
            both(&self.holders_of(last), &holding_first)
        };
        out.extend(whole.iter().map(|w| (*w, hashes.len())));
        self.bisect(
            hashes,
            (0, hashes.len() - 1),
            only_in(&holding_first, &whole),
            &mut out,
        );
        out.sort_unstable();
        out
    }

    /// `ending`: workers holding page `lo` but not page `hi`; each one's match length, in
    /// `lo + 1 ..= hi`, goes to `out`.
    fn bisect(
        &self,
        hashes: &[u64],
        (lo, hi): (usize, usize),
        ending: Holding,
        out: &mut Vec<(WorkerId, usize)>,
    ) {
        if ending.is_empty() {
            return;
        }
        if hi - lo <= 1 {
            out.extend(ending.iter().map(|w| (*w, hi)));
            return;
        }
        let mid = lo + (hi - lo) / 2;
        let past = both(&self.holders_of(hashes[mid]), &ending);
        self.bisect(hashes, (lo, mid), only_in(&ending, &past), out);
        self.bisect(hashes, (mid, hi), past, out);
    }

    /// The workers holding page `key`, sorted.
    fn holders_of(&self, key: u64) -> Holding {
        let Some(shard) = self.shards.get(shard_of(key)) else {
            return Holding::new();
        };
        let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        shard
            .pages
            .get(key)
            .map(|holders| holders.iter().map(|e| e.0).collect())
            .unwrap_or_default()
    }

    /// Records that `worker` now holds these pages.
    pub fn insert(&self, hashes: &[u64], worker: WorkerId) {
        let order = ShardOrder::new(hashes);
        let up_front = (self.shard_ceiling + 1).min(UP_FRONT_ENTRIES);
        for (mut shard, pages) in self.by_shard(&order) {
            shard.reserve(up_front);
            shard.pages.warm(pages.iter().map(|&page| hashes[page]));
            // Deepest first. Each shard has its own recency, so its pages in reverse page
            // order leave it as inserting the whole prompt deepest first would.
            for &page in pages.iter().rev() {
                self.add(&mut shard, hashes[page], worker);
            }
        }
    }

    /// Records that `worker` holds page `key` in its shard (locked), evicting a batch past the
    /// ceiling.
    fn add(&self, shard: &mut Shard, key: u64, worker: WorkerId) {
        shard.touch(key, worker);
        if shard.recency.len() > self.shard_ceiling {
            shard.evict_to(self.shard_low_water);
        }
    }

    /// Evicts down to the budget.
    pub fn evict(&self) {
        for m in self.shards.iter() {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .evict_to(self.shard_budget);
        }
    }

    pub fn remove_worker(&self, id: WorkerId) {
        self.retain_workers(&|w| w != id);
    }

    /// Forgets every worker not in `live`.
    pub fn retain_live(&self, live: &[WorkerId]) {
        self.retain_workers(&|w| live.contains(&w));
    }

    fn retain_workers(&self, keep: &dyn Fn(WorkerId) -> bool) {
        for m in self.shards.iter() {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain_workers(keep);
        }
    }

    pub fn size(&self) -> IndexSize {
        let mut size = IndexSize::default();
        for m in self.shards.iter() {
            let s = m.lock().unwrap_or_else(|e| e.into_inner());
            size.pages += s.pages.len();
            size.entries += s.recency.len();
        }
        size.tokens = size.entries * self.page_size;
        size
    }
}

/// Bits 32.. pick the shard: the map uses the low bits for buckets and the top 7 as tags.
fn shard_of(key: u64) -> usize {
    (key >> 32) as usize % SHARDS
}

/// A prompt's page positions grouped by shard (a counting sort), each group in page order.
struct ShardOrder {
    pages: Vec<usize>,
    /// Shard `i`'s positions are `pages[starts[i]..starts[i + 1]]`.
    starts: [usize; SHARDS + 1],
}

impl ShardOrder {
    fn new(hashes: &[u64]) -> ShardOrder {
        let mut starts = [0; SHARDS + 1];
        for key in hashes {
            starts[shard_of(*key) + 1] += 1;
        }
        for i in 0..SHARDS {
            starts[i + 1] += starts[i];
        }
        let mut next = starts;
        let mut pages = vec![0; hashes.len()];
        for (page, key) in hashes.iter().enumerate() {
            let slot = &mut next[shard_of(*key)];
            pages[*slot] = page;
            *slot += 1;
        }
        ShardOrder { pages, starts }
    }

    fn pages_in(&self, shard: usize) -> &[usize] {
        &self.pages[self.starts[shard]..self.starts[shard + 1]]
    }
}

/// Workers holding a page, sorted; a few inline, as most pages have one or two holders.
type Holding = SmallVec<[WorkerId; 4]>;

/// The workers in both sorted lists.
fn both(a: &[WorkerId], b: &[WorkerId]) -> Holding {
    let mut rest = b.iter().peekable();
    a.iter()
        .filter(|w| {
            while rest.next_if(|r| *r < *w).is_some() {}
            rest.peek().is_some_and(|r| *r == *w)
        })
        .copied()
        .collect()
}

/// The workers of sorted `a` not in sorted `b`.
fn only_in(a: &[WorkerId], b: &[WorkerId]) -> Holding {
    let mut rest = b.iter().peekable();
    a.iter()
        .filter(|w| {
            while rest.next_if(|r| *r < *w).is_some() {}
            rest.peek().is_none_or(|r| *r != *w)
        })
        .copied()
        .collect()
}

/// Matched pages of worker `id` in a `match_pages` result.
pub fn pages_for(matches: &[(WorkerId, usize)], id: WorkerId) -> usize {
    matches
        .binary_search_by_key(&id, |e| e.0)
        .ok()
        .and_then(|i| matches.get(i))
        .map_or(0, |e| e.1)
}

mod shard;
#[cfg(test)]
mod tests;
