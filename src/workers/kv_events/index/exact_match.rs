//! A prompt matched against the exact index.

use smallvec::SmallVec;

use super::blocks::Slot;
use crate::workers::WorkerId;

/// A prompt matched against the index: cached tokens per covered worker.
#[derive(Debug, Default)]
pub struct ExactMatch {
    /// Covered workers, sorted by id, with the pages each matched and the view (slot) that
    /// matched them.
    pub(super) pages: SmallVec<[(WorkerId, u32, Slot); 8]>,
    /// Free KV blocks of each worker in `pages`, in the same order.
    pub(super) free_blocks: SmallVec<[usize; 8]>,
    pub(super) block_size: usize,
    pub(super) keys: Vec<u64>,
}

impl ExactMatch {
    /// Cached tokens on `w`, or `None` when `w` is not covered (use the approximate index).
    pub fn cached_tokens(&self, w: WorkerId) -> Option<usize> {
        let i = self.pages.binary_search_by_key(&w, |e| e.0).ok()?;
        self.pages.get(i).map(|e| e.1 as usize * self.block_size)
    }

    /// [`ExactMatch::cached_tokens`], and the free KV tokens on `w`, in one lookup.
    pub fn cached_and_free(&self, w: WorkerId) -> Option<(usize, usize)> {
        let i = self.pages.binary_search_by_key(&w, |e| e.0).ok()?;
        let (pages, free) = (self.pages.get(i)?.1, *self.free_blocks.get(i)?);
        Some((
            pages as usize * self.block_size,
            free.saturating_mul(self.block_size),
        ))
    }

    pub fn covers(&self, w: WorkerId) -> bool {
        self.pages.binary_search_by_key(&w, |e| e.0).is_ok()
    }
}
