//! How many of a prompt's tokens each worker holds: exactly, from the KV-event index, for a
//! worker whose view is in sync; otherwise the approximate index's guess (what this gateway
//! routed there). The approximate index is neither matched nor taught for covered workers: it
//! only stands in for them while their views rebuild, learning from then on.
//!
//! The exact index also knows how much of a covered worker's KV is free, hence how many cached
//! tokens a prefill there would evict ([`Cached::evicted`]); for other workers that is unknown
//! and taken as none.

use std::sync::Arc;

use super::prefix_index::{pages_for, PrefixIndex};
use crate::workers::kv_events::{ExactMatch, KvIndex};
use crate::workers::{Worker, WorkerId};

pub struct Cached {
    approx: Vec<(WorkerId, usize)>,
    /// Bit `id % 64` set for each worker in `approx`. Most workers hold none of a prompt: the
    /// bit answers for them, where a binary search per worker mispredicts its branches.
    approx_bits: u64,
    page_size: usize,
    exact: Option<ExactMatch>,
}

impl Cached {
    /// `hashes`: the prompt's page keys in `index`'s page size; `workers`: the candidates.
    pub fn lookup(
        index: &PrefixIndex,
        kv: Option<&KvIndex>,
        prompt: &[u32],
        hashes: &[u64],
        workers: &[&Arc<Worker>],
    ) -> Cached {
        let exact = kv.and_then(|kv| {
            let same = kv.block_size() == index.page_size();
            kv.lookup(prompt, same.then_some(hashes))
        });
        let all_exact = exact
            .as_ref()
            .is_some_and(|e| workers.iter().all(|w| e.covers(w.id)));
        let approx = if all_exact {
            Vec::new()
        } else {
            index.match_pages(hashes)
        };
        Cached {
            approx_bits: approx.iter().fold(0, |bits, (w, _)| bits | bit(*w)),
            approx,
            page_size: index.page_size(),
            exact,
        }
    }

    #[inline]
    pub fn tokens(&self, w: WorkerId) -> usize {
        match self.exact.as_ref().and_then(|e| e.cached_tokens(w)) {
            Some(tokens) => tokens,
            None => self.approx_tokens(w),
        }
    }

    /// [`Cached::tokens`] of `w` (at most `prompt`), and the cached tokens a prefill of the rest
    /// there evicts: what does not fit in its free KV (a radix cache makes room by dropping its
    /// least recently used entries), 0 when unknown. One lookup, for a scan over every worker.
    #[inline]
    pub fn tokens_and_evicted(&self, w: WorkerId, prompt: usize) -> (usize, usize) {
        match self.exact.as_ref().and_then(|e| e.cached_and_free(w)) {
            Some((cached, free)) => {
                let cached = cached.min(prompt);
                (cached, (prompt - cached).saturating_sub(free))
            }
            None => (self.approx_tokens(w).min(prompt), 0),
        }
    }

    #[inline]
    fn approx_tokens(&self, w: WorkerId) -> usize {
        if self.approx_bits & bit(w) == 0 {
            0
        } else {
            pages_for(&self.approx, w) * self.page_size
        }
    }

    /// The prompt goes to `w`: the exact index credits it until its events arrive when `w` is
    /// covered; otherwise the approximate index learns it.
    pub fn record(&self, index: &PrefixIndex, kv: Option<&KvIndex>, hashes: &[u64], w: WorkerId) {
        match (kv, &self.exact) {
            (Some(kv), Some(exact)) if exact.covers(w) => kv.speculate(exact, w),
            _ => index.insert(hashes, w),
        }
    }
}

fn bit(w: WorkerId) -> u64 {
    1 << (w.0 % 64)
}

/// Membership changed: views of workers no longer in `live` go at once (the subscriptions'
/// reconcile loop also stops following them).
pub fn retain_live_views(kv: Option<&KvIndex>, live: &[WorkerId]) {
    if let Some(kv) = kv {
        for (w, _) in kv.workers() {
            if !live.contains(&w) {
                kv.drop_worker(w);
            }
        }
    }
}
