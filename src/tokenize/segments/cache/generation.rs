//! One generation of the piece cache: short pieces keyed by value, the rest by their bytes;
//! a piece's one id in its map slot, the ids of pieces of several one after another in one array.
//!
//! Its maps hold plain values (a key, an id or where the ids are), so an entry costs no
//! allocation of its own (but a long piece's key), and freeing a generation of 200,000 entries
//! is freeing a few blocks, not a pass over them that took ~6 ms on the tokenizing thread.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use super::key::{Key, ShortKey};
use super::Hasher;

/// A piece's ids: where they are in its generation's array, or for a piece of one id (most
/// words) the id itself, read from the map's slot without a second cache miss.
#[derive(Clone, Copy)]
struct Span {
    /// The id if `len` is 1, else where the ids start.
    at: u32,
    len: u32,
}

#[derive(Default)]
pub struct Generation {
    short: HashMap<ShortKey, Span, Hasher>,
    long: HashMap<Box<[u8]>, Span, Hasher>,
    /// The ids of every entry of several; a removed entry's stay until the generation is
    /// freed (only the previous generation has entries removed, and it takes no more).
    ids: Vec<u32>,
}

impl Generation {
    pub fn get(&self, key: Key<'_>) -> Option<&[u32]> {
        let span = match key {
            Key::Short(k) => self.short.get(&k),
            Key::Long(piece) => self.long.get(piece),
        };
        self.ids_of(span?)
    }

    /// Takes the entry out and appends its ids to `out`; whether it was there.
    pub fn take_into(&mut self, key: Key<'_>, out: &mut Vec<u32>) -> bool {
        let span = match key {
            Key::Short(k) => self.short.remove(&k),
            Key::Long(piece) => self.long.remove(piece),
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
            Key::Short(k) => match self.short.entry(k) {
                Entry::Occupied(_) => false,
                Entry::Vacant(slot) => {
                    slot.insert(span);
                    true
                }
            },
            Key::Long(piece) if self.long.contains_key(piece) => false,
            Key::Long(piece) => {
                self.long.insert(piece.into(), span);
                true
            }
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
        let short = self
            .short
            .iter()
            .map(|(key, s)| (key.len(), s.len as usize));
        short.chain(
            self.long
                .iter()
                .map(|(piece, s)| (piece.len(), s.len as usize)),
        )
    }

    /// What each part holds: short map, long map, ids.
    #[cfg(test)]
    pub fn held(&self) -> [usize; 3] {
        [self.short.len(), self.long.len(), self.ids.len()]
    }

    #[cfg(test)]
    pub fn a_piece(&self) -> Option<Vec<u8>> {
        let short = self.short.keys().map(|key| key.bytes());
        short
            .chain(self.long.keys().map(|piece| piece.to_vec()))
            .next()
    }
}
