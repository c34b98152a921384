//! The piece cache: pieces' ids kept within a byte budget, recently used first.

mod front;
mod generation;
mod key;

use std::collections::HashSet;
use std::hash::BuildHasher;

use front::Front;
use generation::Generation;
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
/// becomes the previous one and the old previous one's entries are dropped; a hit in the
/// previous generation moves the entry forward. O(1), no per-entry bookkeeping.
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
                [id] => out.push(*id),
                _ => out.extend_from_slice(ids),
            }
            if let Key::Short(short) = key {
                self.front.put(short, ids);
            }
            return true;
        }
        let from = out.len();
        if !self.previous.take_into(key, out) {
            return false;
        }
        let ids = &out[from..];
        self.previous_bytes -= entry_bytes(piece.len(), ids.len());
        self.insert_ids(key, piece.len(), ids);
        true
    }

    /// Whether `segment` was seen before; remembers it now.
    pub(super) fn seen_before(&mut self, segment: &str) -> bool {
        if self.seen.len() >= SEEN_MAX {
            self.seen.clear();
        }
        !self.seen.insert(self.seen_hasher.hash_one(segment))
    }

    pub(super) fn insert(&mut self, piece: &[u8], ids: &[u32]) {
        self.insert_ids(Key::of(piece), piece.len(), ids);
    }

    fn insert_ids(&mut self, key: Key<'_>, piece_len: usize, ids: &[u32]) {
        let bytes = entry_bytes(piece_len, ids.len());
        if self.current_bytes + bytes > CACHE_BUDGET_BYTES / 2 {
            self.rotate();
        }
        if let Key::Short(short) = key {
            self.front.put(short, ids);
        }
        if self.current.insert(key, ids) {
            self.current_bytes += bytes;
        }
    }

    /// The full current generation becomes the previous one; the old previous one is freed,
    /// here under the lock: a few blocks (its maps, its array of ids, long pieces' keys), not
    /// one per entry. The new one starts empty and grows as it fills: kept and emptied instead,
    /// a table sized for a whole generation spreads the words a load repeats thin, and their
    /// lookups took 3-21 % longer (20,000 words, seven generations, a throwaway benchmark).
    fn rotate(&mut self) {
        self.previous = std::mem::take(&mut self.current);
        self.previous_bytes = self.current_bytes;
        self.current_bytes = 0;
    }
}
