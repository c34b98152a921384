//! One-id short pieces last looked up, in a direct-mapped table in front of the generations'
//! maps. Most pieces of a prompt are a common word that is one token: here its lookup is one
//! multiply, one slot's compare and no probing, where a map lookup hashes, probes a control
//! group and compares (about 60 instructions more a piece, on a 2,000-word prompt a sixth of
//! the gateway's work for the request).
//!
//! A piece's ids never change for one tokenizer, so an entry is never stale: it is only
//! overwritten by another piece that maps to its slot, and then looked up in the maps again.
//! Its memory is fixed (`SLOTS` × 24 bytes), outside the maps' byte budget.

use super::key::ShortKey;

/// Slots: enough for a prompt's working vocabulary, and 96 KiB, which stays in the L2 cache.
const SLOTS: usize = 4096;

#[derive(Clone, Copy)]
struct Slot {
    key: ShortKey,
    id: u32,
}

pub struct Front {
    slots: Box<[Slot]>,
}

impl Default for Front {
    fn default() -> Front {
        let empty = Slot {
            key: ShortKey::NONE,
            id: 0,
        };
        Front {
            slots: vec![empty; SLOTS].into_boxed_slice(),
        }
    }
}

impl Front {
    /// The one id of `key`'s piece, if this table holds it.
    #[inline]
    pub fn get(&self, key: ShortKey) -> Option<u32> {
        self.slots
            .get(slot_of(key))
            .filter(|s| s.key == key)
            .map(|s| s.id)
    }

    /// Remembers that `key`'s piece is the one token `id`, in place of what held its slot.
    #[inline]
    pub fn put(&mut self, key: ShortKey, id: u32) {
        if let Some(s) = self.slots.get_mut(slot_of(key)) {
            *s = Slot { key, id };
        }
    }
}

/// The slot of `key`: the top bits of a multiply, which depend on every bit of the piece. A
/// client who makes pieces share a slot only makes them miss here and go to the maps.
#[inline]
fn slot_of(key: ShortKey) -> usize {
    const BITS: u32 = SLOTS.trailing_zeros();
    let (lo, hi) = key.words();
    let mixed = (lo ^ hi.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> (64 - BITS)) as usize
}

#[cfg(test)]
mod tests {
    use super::super::key::Key;
    use super::*;

    fn short(piece: &str) -> ShortKey {
        let key = Key::of(piece.as_bytes()).short();
        key.unwrap_or_else(|| panic!("{piece:?} is not short"))
    }

    #[test]
    fn gives_back_what_was_put_and_nothing_for_other_pieces() {
        let mut front = Front::default();
        // An empty table holds nothing, not even the empty piece.
        assert_eq!(front.get(short("")), None);
        assert_eq!(front.get(short(" the")), None);
        front.put(short(" the"), 279);
        assert_eq!(front.get(short(" the")), Some(279));
        // Same bytes shorter or longer, or other case: other pieces.
        for other in [" th", " the ", " The", "the"] {
            assert_eq!(front.get(short(other)), None, "{other:?}");
        }
    }

    #[test]
    fn a_piece_that_takes_a_slot_pushes_out_the_one_that_held_it() {
        let mut front = Front::default();
        let first = short(" alpha");
        let slot = slot_of(first);
        // Some other piece mapping to the same slot.
        let rival = (0..100_000)
            .map(|n| format!(" w{n}"))
            .find(|p| slot_of(short(p)) == slot)
            .map(|p| short(&p));
        let Some(rival) = rival else {
            panic!("no piece found for slot {slot}");
        };
        front.put(first, 1);
        front.put(rival, 2);
        assert_eq!(front.get(first), None);
        assert_eq!(front.get(rival), Some(2));
    }

    #[test]
    fn common_words_spread_over_the_slots() {
        let words: Vec<String> = (0..SLOTS / 4).map(|n| format!(" word{n}")).collect();
        let mut used: Vec<usize> = words.iter().map(|w| slot_of(short(w))).collect();
        used.sort_unstable();
        used.dedup();
        // A uniform spread of n keys over 4n slots fills about 88 % of n distinct slots.
        assert!(used.len() * 100 > words.len() * 80, "{} slots", used.len());
    }
}
