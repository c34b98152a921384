//! Short pieces of up to `MAX_IDS` ids last looked up, in a direct-mapped table in front of the
//! generations' maps. Most pieces of a prompt are a word of one to three tokens: here its lookup
//! is one multiply, one slot's compare and no probing, where a map lookup hashes, probes a
//! control group, compares and, for a word of several tokens, follows a pointer to its ids
//! (about 60 to 100 instructions more a piece: on a 2,000-word prompt a sixth to a fifth of the
//! gateway's work for the request).
//!
//! A piece's ids never change for one tokenizer, so an entry is never stale: it is only
//! overwritten by another piece that maps to its slot, and then looked up in the maps again.
//! Its memory is fixed (`SLOTS` × 32 bytes), outside the maps' byte budget.

use super::key::ShortKey;

/// Slots: a prompt's common words (a load drawing from 20,000 words finds two thirds of its
/// pieces here), and 128 KiB, which stays in the L2 cache.
const SLOTS: usize = 4096;
/// A piece of more ids than this is left to the maps (few words are four tokens or more).
const MAX_IDS: usize = 3;

#[derive(Clone, Copy)]
struct Slot {
    key: ShortKey,
    ids: [u32; MAX_IDS],
    len: u8,
}

pub struct Front {
    slots: Box<[Slot]>,
}

impl Default for Front {
    fn default() -> Front {
        let empty = Slot {
            key: ShortKey::NONE,
            ids: [0; MAX_IDS],
            len: 0,
        };
        Front {
            slots: vec![empty; SLOTS].into_boxed_slice(),
        }
    }
}

impl Front {
    /// The ids of `key`'s piece, if this table holds it.
    #[inline]
    pub fn get(&self, key: ShortKey) -> Option<&[u32]> {
        let slot = self.slots.get(slot_of(key)).filter(|s| s.key == key)?;
        slot.ids.get(..usize::from(slot.len))
    }

    /// Remembers that `key`'s piece is `ids`, in place of what held its slot; a piece of more
    /// than `MAX_IDS` ids is not kept.
    #[inline]
    pub fn put(&mut self, key: ShortKey, ids: &[u32]) {
        let Some(s) = self.slots.get_mut(slot_of(key)) else {
            return;
        };
        let Some(held) = s.ids.get_mut(..ids.len()) else {
            return;
        };
        held.copy_from_slice(ids);
        s.key = key;
        // At most `MAX_IDS`, or `get_mut` above would have found no room.
        s.len = ids.len() as u8;
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
        front.put(short(" the"), &[279]);
        assert_eq!(front.get(short(" the")), Some(&[279][..]));
        front.put(short(" thereof"), &[612, 1059]);
        assert_eq!(front.get(short(" thereof")), Some(&[612, 1059][..]));
        // More ids than a slot holds: left to the maps.
        front.put(short(" antidis"), &[1, 2, 3, 4]);
        assert_eq!(front.get(short(" antidis")), None);
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
        front.put(first, &[1]);
        front.put(rival, &[2, 3]);
        assert_eq!(front.get(first), None);
        assert_eq!(front.get(rival), Some(&[2, 3][..]));
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
