//! The piece cache: pieces' ids kept within a byte budget, recently used first.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

/// Bytes the cache may hold, both generations together (estimated: key, ids, map overhead).
pub(super) const CACHE_BUDGET_BYTES: usize = 32 * 1024 * 1024;
/// What one entry costs besides its key and ids: the map slot, the two heap headers.
const ENTRY_OVERHEAD_BYTES: usize = 64;
/// How many long segments are remembered as seen (by hash) before that memory is cleared.
const SEEN_MAX: usize = 65_536;

pub(super) type Hasher = foldhash::fast::RandomState;
/// Keyed by the piece's bytes: slicing them needs no check for a character boundary (a piece
/// starts and ends at an ASCII space or digit, or at the text's ends).
type Generation = HashMap<Box<[u8]>, Box<[u32]>, Hasher>;

/// A bounded cache that keeps what was used recently: when the current generation is full it
/// becomes the previous one and the old previous is dropped; a hit in the previous generation
/// moves the entry forward. O(1), no per-entry bookkeeping.
#[derive(Default)]
pub(super) struct TwoGenerations {
    pub(super) current: Generation,
    pub(super) previous: Generation,
    pub(super) current_bytes: usize,
    pub(super) previous_bytes: usize,
    /// Hashes of long segments seen once: only those seen again are cached whole, so unique
    /// long prompts do not fill the cache with entries that are never hit.
    seen: HashSet<u64, Hasher>,
    seen_hasher: Hasher,
}

pub(super) fn entry_bytes(piece: &[u8], ids: &[u32]) -> usize {
    piece.len() + 4 * ids.len() + ENTRY_OVERHEAD_BYTES
}

impl TwoGenerations {
    /// Estimated bytes held, both generations.
    pub(super) fn bytes(&self) -> usize {
        self.current_bytes + self.previous_bytes
    }

    /// Appends the ids of `piece` to `out` if it is cached.
    pub(super) fn copy_into(&mut self, piece: &[u8], out: &mut Vec<u32>) -> bool {
        if let Some(ids) = self.current.get(piece) {
            // Most words are one id: pushed, not copied by a call to `memcpy`.
            match **ids {
                [id] => out.push(id),
                _ => out.extend_from_slice(ids),
            }
            return true;
        }
        let Some((key, ids)) = self.previous.remove_entry(piece) else {
            return false;
        };
        out.extend_from_slice(&ids);
        self.previous_bytes -= entry_bytes(&key, &ids);
        // Moving an entry forward can rotate the generations: what falls out is freed here, under
        // the lock, but only on the rare hit that fills the current generation.
        drop(self.insert(key, ids));
        true
    }

    /// Whether `segment` was seen before; remembers it now.
    pub(super) fn seen_before(&mut self, segment: &str) -> bool {
        if self.seen.len() >= SEEN_MAX {
            self.seen.clear();
        }
        !self.seen.insert(self.seen_hasher.hash_one(segment))
    }

    /// Returns the generation this insert pushed out, for the caller to drop after unlocking
    /// (freeing a full generation's entries takes milliseconds).
    #[must_use]
    pub(super) fn insert(&mut self, piece: Box<[u8]>, ids: Box<[u32]>) -> Option<Generation> {
        let bytes = entry_bytes(&piece, &ids);
        let mut evicted = None;
        if self.current_bytes + bytes > CACHE_BUDGET_BYTES / 2 {
            evicted = Some(std::mem::replace(
                &mut self.previous,
                std::mem::take(&mut self.current),
            ));
            self.previous_bytes = self.current_bytes;
            self.current_bytes = 0;
        }
        let key_len = piece.len();
        self.current_bytes += bytes;
        // Two threads that missed the same piece both insert it: count it once.
        if let Some(replaced) = self.current.insert(piece, ids) {
            self.current_bytes -= key_len + 4 * replaced.len() + ENTRY_OVERHEAD_BYTES;
        }
        evicted
    }
}
