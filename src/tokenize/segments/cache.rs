//! The piece cache: pieces' ids kept within a byte budget, recently used first.

mod front;
mod generation;
mod key;

use std::collections::HashSet;
use std::hash::BuildHasher;

use front::Front;
use generation::{Generation, Ids};
use key::Key;

/// Bytes the cache may hold, both generations together (estimated: key, ids, map overhead;
/// the front table's fixed 128 KiB besides).
pub(super) const CACHE_BUDGET_BYTES: usize = 32 * 1024 * 1024;
/// What one entry costs besides its key and ids, at most: the map slot and two heap blocks' headers
/// (a short piece's key and a one-id piece's ids are in the slot).
const ENTRY_OVERHEAD_BYTES: usize = 64;
/// How many long segments are remembered as seen (by hash) before that memory is cleared.
const SEEN_MAX: usize = 65_536;

pub(super) type Hasher = foldhash::fast::RandomState;

/// A bounded cache that keeps what was used recently: when the current generation is full it
/// becomes the previous one and the old previous is dropped; a hit in the previous generation
/// moves the entry forward. O(1), no per-entry bookkeeping.
#[derive(Default)]
pub(super) struct TwoGenerations {
    pub(super) current: Generation,
    pub(super) previous: Generation,
    pub(super) current_bytes: usize,
    pub(super) previous_bytes: usize,
    /// One-id short pieces, looked up before the maps.
    front: Front,
    /// Hashes of long segments seen once: only those seen again are cached whole, so unique
    /// long prompts do not fill the cache with entries that are never hit.
    seen: HashSet<u64, Hasher>,
    seen_hasher: Hasher,
}

/// What an entry is counted as holding.
pub(super) fn entry_bytes(piece_len: usize, ids_len: usize) -> usize {
    piece_len + 4 * ids_len + ENTRY_OVERHEAD_BYTES
}

impl TwoGenerations {
    /// Estimated bytes held, both generations.
    pub(super) fn bytes(&self) -> usize {
        self.current_bytes + self.previous_bytes
    }

    /// Appends the ids of `piece` to `out` if it is cached. Always inline: called once per
    /// word, its call and saved registers were about a sixth of its cost.
    #[inline(always)]
    pub(super) fn copy_into(&mut self, piece: &[u8], out: &mut Vec<u32>) -> bool {
        // The common case inline, in the caller's loop; the maps behind a call.
        let key = Key::of(piece);
        if let Some(ids) = key.short().and_then(|k| self.front.get(k)) {
            // Most words are one id: pushed, not copied by a call to `memcpy`.
            match ids {
                [id] => out.push(*id),
                _ => out.extend_from_slice(ids),
            }
            return true;
        }
        self.copy_from_maps(piece, key, out)
    }

    #[inline(never)]
    fn copy_from_maps(&mut self, piece: &[u8], key: Key<'_>, out: &mut Vec<u32>) -> bool {
        if let Some(ids) = self.current.get(key) {
            match ids {
                Ids::One(id) => out.push(*id),
                Ids::Many(ids) => out.extend_from_slice(ids),
            }
            if let Key::Short(short) = key {
                self.front.put(short, ids.as_slice());
            }
            return true;
        }
        let Some(ids) = self.previous.remove(key) else {
            return false;
        };
        out.extend_from_slice(ids.as_slice());
        self.previous_bytes -= entry_bytes(piece.len(), ids.len());
        // Moving an entry forward can rotate the generations: what falls out is freed here, under
        // the lock, but only on the rare hit that fills the current generation.
        drop(self.insert_ids(key, piece.len(), ids));
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
    pub(super) fn insert(&mut self, piece: &[u8], ids: Box<[u32]>) -> Option<Generation> {
        self.insert_ids(Key::of(piece), piece.len(), ids.into())
    }

    fn insert_ids(&mut self, key: Key<'_>, piece_len: usize, ids: Ids) -> Option<Generation> {
        let bytes = entry_bytes(piece_len, ids.len());
        let mut evicted = None;
        if self.current_bytes + bytes > CACHE_BUDGET_BYTES / 2 {
            evicted = Some(std::mem::replace(
                &mut self.previous,
                std::mem::take(&mut self.current),
            ));
            self.previous_bytes = self.current_bytes;
            self.current_bytes = 0;
        }
        self.current_bytes += bytes;
        if let Key::Short(short) = key {
            self.front.put(short, ids.as_slice());
        }
        // Two threads that missed the same piece both insert it: count it once.
        if let Some(replaced) = self.current.insert(key, ids) {
            self.current_bytes -= entry_bytes(piece_len, replaced.len());
        }
        evicted
    }
}
