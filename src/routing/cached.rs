//! How many of a prompt's tokens each worker holds: exactly, from the KV-event index, for a
//! worker whose view is in sync; otherwise the approximate index's guess (what this gateway
//! routed there).

use super::prefix_index::{pages_for, PrefixIndex};
use crate::workers::kv_events::{ExactMatch, KvIndex};
use crate::workers::WorkerId;

pub struct Cached {
    approx: Vec<(WorkerId, usize)>,
    page_size: usize,
    exact: Option<ExactMatch>,
}

impl Cached {
    /// `hashes`: the prompt's page keys in `index`'s page size.
    pub fn lookup(
        index: &PrefixIndex,
        kv: Option<&KvIndex>,
        prompt: &[u32],
        hashes: &[u64],
    ) -> Cached {
        let exact = kv.and_then(|kv| {
            let same = kv.block_size() == index.page_size();
            kv.lookup(prompt, same.then_some(hashes))
        });
        Cached {
            approx: index.match_pages(hashes),
            page_size: index.page_size(),
            exact,
        }
    }

    pub fn tokens(&self, w: WorkerId) -> usize {
        self.exact
            .as_ref()
            .and_then(|e| e.cached_tokens(w))
            .unwrap_or_else(|| pages_for(&self.approx, w) * self.page_size)
    }

    /// The prompt goes to `w`: both indexes learn it (the exact one until its events arrive).
    pub fn record(&self, index: &PrefixIndex, kv: Option<&KvIndex>, hashes: &[u64], w: WorkerId) {
        index.insert(hashes, w);
        if let (Some(kv), Some(exact)) = (kv, &self.exact) {
            kv.speculate(exact, w);
        }
    }
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
