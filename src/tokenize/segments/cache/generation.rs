//! One generation of the piece cache: short pieces keyed by value, the rest by their bytes;
//! a piece's one id in its map slot, the ids of pieces of several one after another in one array.
//!
//! Its maps hold plain values (a key, an id or where the ids are), so an entry costs no
//! allocation of its own (but a long piece's key), and freeing a generation of 200,000 entries
//! is freeing a few blocks, not a pass over them that took ~6 ms on the tokenizing thread.
//!
//! Each map is split in [`SHARDS`] by the key's hash. A map grows by moving every entry into a
//! table twice the size at once, under the lock, on the thread that tokenizes (for most bodies
//! the runtime thread every stream shares): a generation's last growth, ~230,000 short pieces,
//! took 3.5-4 ms of moving alone, and on a VM up to ~30 ms with the new table's fresh pages
//! faulted in. A shard grows on its own and moves a sixty-fourth of that; the shards, filled at
//! random, reach their growth points at different inserts.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::BuildHasher;

use super::key::{Key, ShortKey};
use super::Hasher;

/// Shards per map (a power of two: a shard is picked by the top bits of a hash).
const SHARDS: usize = 64;
const _: () = assert!(SHARDS.is_power_of_two());
/// Bytes at each end of a long piece its shard is picked by.
const LONG_ENDS: usize = 64;

/// A piece's ids: where they are in its generation's array, or for a piece of one id (most
/// words) the id itself, read from the map's slot without a second cache miss.
#[derive(Clone, Copy)]
struct Span {
    /// The id if `len` is 1, else where the ids start.
    at: u32,
    len: u32,
}

/// One shard of short pieces, one of long pieces.
type ShortShard = HashMap<ShortKey, Span, Hasher>;
type LongShard = HashMap<Box<[u8]>, Span, Hasher>;

pub struct Generation {
    short: Box<[ShortShard]>,
    long: Box<[LongShard]>,
    /// Picks a key's shard: seeded apart from the shards' own hashers, so that the keys of one
    /// shard still spread over its table, and at random, so that a client cannot choose pieces
    /// that all land in one shard.
    shard_of: Hasher,
    /// The ids of every entry of several; a removed entry's stay until the generation is
    /// freed (only the previous generation has entries removed, and it takes no more).
    ids: Vec<u32>,
}

impl Default for Generation {
    fn default() -> Generation {
        Generation {
            short: (0..SHARDS).map(|_| HashMap::default()).collect(),
            long: (0..SHARDS).map(|_| HashMap::default()).collect(),
            shard_of: Hasher::default(),
            ids: Vec::new(),
        }
    }
}

/// The shard of a key hashed to `hash`: its top bits.
fn shard(hash: u64) -> usize {
    hash.checked_shr(64 - SHARDS.trailing_zeros()).unwrap_or(0) as usize
}

impl Generation {
    fn short_map(&self, k: &ShortKey) -> Option<&ShortShard> {
        self.short.get(self.short_shard(k))
    }

    fn long_map(&self, piece: &[u8]) -> Option<&LongShard> {
        self.long.get(self.long_shard(piece))
    }

    fn short_map_mut(&mut self, k: &ShortKey) -> Option<&mut ShortShard> {
        let at = self.short_shard(k);
        self.short.get_mut(at)
    }

    fn long_map_mut(&mut self, piece: &[u8]) -> Option<&mut LongShard> {
        let at = self.long_shard(piece);
        self.long.get_mut(at)
    }

    fn short_shard(&self, k: &ShortKey) -> usize {
        shard(self.shard_of.hash_one(k))
    }

    /// By the piece's length and its two ends: the map hashes the whole piece anyway, and a
    /// prompt's whole text is one (~6 K instructions to hash 12 KB again). Pieces that share
    /// their length and both ends share a shard: a client who makes such pieces gets one
    /// unsharded map back, of pieces over `2 * LONG_ENDS` bytes (fewer of which fit a
    /// generation's budget).
    fn long_shard(&self, piece: &[u8]) -> usize {
        let n = piece.len();
        let ends = (
            &piece[..n.min(LONG_ENDS)],
            &piece[n.saturating_sub(LONG_ENDS)..],
        );
        shard(self.shard_of.hash_one((n, ends)))
    }

    pub fn get(&self, key: Key<'_>) -> Option<&[u32]> {
        let span = match key {
            Key::Short(k) => self.short_map(&k)?.get(&k),
            Key::Long(piece) => self.long_map(piece)?.get(piece),
        };
        self.ids_of(span?)
    }

    /// Takes the entry out and appends its ids to `out`; whether it was there.
    pub fn take_into(&mut self, key: Key<'_>, out: &mut Vec<u32>) -> bool {
        let span = match key {
            Key::Short(k) => self.short_map_mut(&k).and_then(|map| map.remove(&k)),
            Key::Long(piece) => self.long_map_mut(piece).and_then(|map| map.remove(piece)),
        };
        match span.as_ref().and_then(|span| self.ids_of(span)) {
            Some(ids) => {
                out.extend_from_slice(ids);
                true
            }
            None => false,
        }
    }

    /// Adds the entry unless its piece is there already (a piece's ids never change: two
    /// threads that missed the same piece both insert it); also not if the array's offsets
    /// cannot reach this many ids (16 GiB of them). Whether it was added.
    pub fn insert(&mut self, key: Key<'_>, ids: &[u32]) -> bool {
        let Some(span) = self.span_for(ids) else {
            return false;
        };
        let added = match key {
            Key::Short(k) => match self.short_map_mut(&k).map(|map| map.entry(k)) {
                Some(Entry::Vacant(slot)) => {
                    slot.insert(span);
                    true
                }
                Some(Entry::Occupied(_)) | None => false,
            },
            Key::Long(piece) => match self.long_map_mut(piece) {
                Some(map) if !map.contains_key(piece) => {
                    map.insert(piece.into(), span);
                    true
                }
                _ => false,
            },
        };
        if added && span.len != 1 {
            self.ids.extend_from_slice(ids);
        }
        added
    }

    /// How `ids` would be kept: the one id itself, or where they would start in the array.
    fn span_for(&self, ids: &[u32]) -> Option<Span> {
        if let [id] = ids {
            return Some(Span { at: *id, len: 1 });
        }
        let at = u32::try_from(self.ids.len()).ok()?;
        let len = u32::try_from(ids.len()).ok()?;
        at.checked_add(len)?;
        Some(Span { at, len })
    }

    fn ids_of<'a>(&'a self, span: &'a Span) -> Option<&'a [u32]> {
        if span.len == 1 {
            return Some(std::slice::from_ref(&span.at));
        }
        let at = span.at as usize;
        self.ids.get(at..at + span.len as usize)
    }

    /// Every piece's length and ids count.
    #[cfg(test)]
    pub fn sizes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let short = self.short.iter().flatten();
        let short = short.map(|(key, s)| (key.len(), s.len as usize));
        let long = self.long.iter().flatten();
        short.chain(long.map(|(piece, s)| (piece.len(), s.len as usize)))
    }

    /// What each part holds: short maps, long maps, ids.
    #[cfg(test)]
    pub fn held(&self) -> [usize; 3] {
        fn entries<K, V>(maps: &[HashMap<K, V, Hasher>]) -> usize {
            maps.iter().map(HashMap::len).sum()
        }
        [entries(&self.short), entries(&self.long), self.ids.len()]
    }

    /// How many shards each map has.
    #[cfg(test)]
    pub fn shards(&self) -> usize {
        SHARDS
    }

    /// The most entries one shard holds, short or long.
    #[cfg(test)]
    pub fn largest_shard(&self) -> usize {
        let short = self.short.iter().map(HashMap::len);
        short
            .chain(self.long.iter().map(HashMap::len))
            .max()
            .unwrap_or(0)
    }

    #[cfg(test)]
    pub fn a_piece(&self) -> Option<Vec<u8>> {
        let short = self
            .short
            .iter()
            .flat_map(|map| map.keys().map(|key| key.bytes()));
        let long = self
            .long
            .iter()
            .flat_map(|map| map.keys().map(|piece| piece.to_vec()));
        short.chain(long).next()
    }
}
