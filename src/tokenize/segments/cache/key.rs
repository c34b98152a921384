//! How a piece is looked up: one of at most 15 bytes (nearly every word with its space) as a
//! 16-byte value, its bytes zero-padded and its length in the last byte. Hashed and compared as
//! two words, where a boxed key costs a hash over its bytes, a pointer to follow and a `memcmp`.

/// Pieces up to this long are `Short`.
const SHORT_MAX: usize = 15;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShortKey {
    lo: u64,
    hi: u64,
}

/// A piece as its generation's maps key it: by its bytes (slicing them needs no check for a
/// character boundary: a piece starts and ends at an ASCII space or digit, or at the text's
/// ends).
#[derive(Clone, Copy)]
pub enum Key<'a> {
    Short(ShortKey),
    Long(&'a [u8]),
}

impl Key<'_> {
    #[inline]
    pub fn of(piece: &[u8]) -> Key<'_> {
        ShortKey::new(piece).map_or(Key::Long(piece), Key::Short)
    }

    /// The key if the piece is short.
    #[inline]
    pub fn short(self) -> Option<ShortKey> {
        match self {
            Key::Short(k) => Some(k),
            Key::Long(_) => None,
        }
    }
}

impl ShortKey {
    /// A key no piece has (its length byte is over `SHORT_MAX`): an empty slot's.
    pub const NONE: ShortKey = ShortKey {
        lo: 0,
        hi: u64::MAX,
    };

    /// The key's two words.
    #[inline]
    pub fn words(self) -> (u64, u64) {
        (self.lo, self.hi)
    }

    /// The piece's bytes in place, read as at most two words (overlapping unless the length is
    /// a whole number of them) rather than byte by byte or through a `memcpy` call.
    #[inline]
    fn new(piece: &[u8]) -> Option<ShortKey> {
        let len = piece.len();
        // The eight and the four bytes from `at`, as integers (little-endian).
        let word = |at: usize| {
            piece[at..]
                .first_chunk()
                .map_or(0, |b| u64::from_le_bytes(*b))
        };
        let half = |at: usize| {
            piece[at..]
                .first_chunk()
                .map_or(0, |b| u32::from_le_bytes(*b))
        };
        let (lo, hi) = match len {
            0..4 => {
                let bytes = piece.iter().enumerate();
                (bytes.fold(0, |lo, (i, &b)| lo | u64::from(b) << (8 * i)), 0)
            }
            4..8 => {
                let rest = u64::from(half(len - 4)) >> (8 * (8 - len));
                (u64::from(half(0)) | rest << 32, 0)
            }
            8 => (word(0), 0),
            9..=SHORT_MAX => (word(0), word(len - 8) >> (8 * (16 - len))),
            _ => return None,
        };
        Some(ShortKey {
            lo,
            hi: hi | (len as u64) << 56,
        })
    }

    #[cfg(test)]
    pub fn len(self) -> usize {
        (self.hi >> 56) as usize
    }

    #[cfg(test)]
    pub fn bytes(self) -> Vec<u8> {
        let mut bytes = [self.lo.to_le_bytes(), self.hi.to_le_bytes()].concat();
        bytes.truncate(self.len());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_key_gives_back_every_byte_at_every_length() {
        // Giving the bytes back makes the key one-to-one: equal keys are equal pieces.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for len in 0..=SHORT_MAX {
            for _ in 0..300 {
                let piece: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Zero bytes and 255s as often as any other two.
                        [0, 255, x as u8, x as u8][(x >> 40) as usize % 4]
                    })
                    .collect();
                let key = ShortKey::new(&piece).unwrap();
                assert_eq!(key.bytes(), piece);
            }
        }
        assert!(ShortKey::new(&[b'x'; SHORT_MAX + 1]).is_none());
        assert!(matches!(Key::of(&[b'x'; SHORT_MAX + 1]), Key::Long(_)));
    }
}
