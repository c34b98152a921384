//! One generation of the piece cache: short pieces keyed by value, the rest by their bytes.

use std::collections::HashMap;

use super::key::{Key, ShortKey};
use super::Hasher;

/// A piece's ids: most words are one, kept without an allocation.
pub enum Ids {
    One(u32),
    Many(Box<[u32]>),
}

impl Ids {
    pub fn len(&self) -> usize {
        match self {
            Ids::One(_) => 1,
            Ids::Many(ids) => ids.len(),
        }
    }

    pub fn as_slice(&self) -> &[u32] {
        match self {
            Ids::One(id) => std::slice::from_ref(id),
            Ids::Many(ids) => ids,
        }
    }
}

impl From<Box<[u32]>> for Ids {
    fn from(ids: Box<[u32]>) -> Ids {
        match *ids {
            [id] => Ids::One(id),
            _ => Ids::Many(ids),
        }
    }
}

#[derive(Default)]
pub struct Generation {
    short: HashMap<ShortKey, Ids, Hasher>,
    long: HashMap<Box<[u8]>, Ids, Hasher>,
}

impl Generation {
    pub fn get(&self, key: Key<'_>) -> Option<&Ids> {
        match key {
            Key::Short(k) => self.short.get(&k),
            Key::Long(piece) => self.long.get(piece),
        }
    }

    pub fn remove(&mut self, key: Key<'_>) -> Option<Ids> {
        match key {
            Key::Short(k) => self.short.remove(&k),
            Key::Long(piece) => self.long.remove(piece),
        }
    }

    /// Returns the ids it replaced.
    pub fn insert(&mut self, key: Key<'_>, ids: Ids) -> Option<Ids> {
        match key {
            Key::Short(k) => self.short.insert(k, ids),
            Key::Long(piece) => self.long.insert(piece.into(), ids),
        }
    }

    /// Every piece's length and ids count.
    #[cfg(test)]
    pub fn sizes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let short = self.short.iter().map(|(key, ids)| (key.len(), ids.len()));
        short.chain(
            self.long
                .iter()
                .map(|(piece, ids)| (piece.len(), ids.len())),
        )
    }

    #[cfg(test)]
    pub fn a_piece(&self) -> Option<Vec<u8>> {
        let short = self.short.keys().map(|key| key.bytes());
        short
            .chain(self.long.keys().map(|piece| piece.to_vec()))
            .next()
    }
}
