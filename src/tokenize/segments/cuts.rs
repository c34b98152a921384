//! Where a prompt may be cut into independently tokenized pieces, and the sample the cuts are
//! checked on when a tokenizer loads.

use std::ops::Range;

/// The pieces of `text`: cut before every single ASCII space that has a non-whitespace
/// character on each side, and between two digits if `digits`.
pub(super) fn pieces(text: &str, digits: bool) -> impl Iterator<Item = Range<usize>> + '_ {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 1;
    std::iter::from_fn(move || {
        while i + 1 < bytes.len() {
            // Only a space (or a digit, with digit cuts) can be a cut: skip to the next one in
            // a tight search, not byte by byte through the checks below.
            let rest = &bytes[i..bytes.len() - 1];
            let next = if digits {
                space_or_digit(rest)
            } else {
                memchr::memchr(b' ', rest)
            };
            let Some(skip) = next else {
                i = bytes.len();
                break;
            };
            let at = i + skip;
            i = at + 1;
            let cut = if bytes[at] == b' ' {
                safe_cut(text, at)
            } else {
                bytes[at - 1].is_ascii_digit()
            };
            if cut {
                let piece = start..at;
                start = at;
                return Some(piece);
            }
        }
        (start < bytes.len()).then(|| {
            let piece = start..bytes.len();
            start = bytes.len();
            piece
        })
    })
}

/// Where the first space or ASCII digit in `bytes` is. Eight bytes at a time (no crate searches
/// for a byte range; byte by byte this was an eighth of a long prompt's tokenizing): in a word
/// `x`, a byte is a space where `x ^ 0x20…` has a zero byte and a digit where `x ^ 0x30…` has
/// one below 10. `(y - n…) & !y & 0x80…` marks bytes of `y` below `n`; a borrow can also mark
/// bytes above a marked one, never below it, so the lowest mark is the first match.
pub(super) fn space_or_digit(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = ONES * 0x80;
    let below = |y: u64, n: u64| y.wrapping_sub(ONES * n) & !y & HIGHS;
    let (words, tail) = bytes.as_chunks::<8>();
    for (k, word) in words.iter().enumerate() {
        let x = u64::from_le_bytes(*word);
        let marks = below(x ^ (ONES * 0x20), 1) | below(x ^ (ONES * 0x30), 10);
        if marks != 0 {
            return Some(8 * k + marks.trailing_zeros() as usize / 8);
        }
    }
    let in_tail = tail.iter().position(|&b| b == b' ' || b.is_ascii_digit());
    in_tail.map(|p| 8 * words.len() + p)
}

/// Whether the space at `at` has a non-whitespace character on each side.
#[inline]
fn safe_cut(text: &str, at: usize) -> bool {
    let bytes = text.as_bytes();
    // Printable ASCII ('!' to DEL) is never whitespace: nearly every cut is decided by two
    // compares, inline where it is called once per word.
    let printable = |b: u8| b.wrapping_sub(b'!') <= 0x7f - b'!';
    if printable(bytes[at - 1]) && printable(bytes[at + 1]) {
        return true;
    }
    // Anything else is decoded (a control character may be whitespace, U+3000 is too).
    let not_space = |c: Option<char>| c.is_some_and(|c| !c.is_whitespace());
    not_space(text[..at].chars().next_back()) && not_space(text[at + 1..].chars().next())
}

/// A sample that exercises every boundary a prompt has: text, specials and other added tokens,
/// newlines, runs of spaces, digits, apostrophes, non-ASCII letters and spaces, and enough of it
/// to span several runs.
pub fn self_check_sample(added: &[String]) -> String {
    let mut s = String::from("Hello there, world 123 on 2024-11-21 at 3.14159, 1234567 or 99%");
    for i in 0..400 {
        s.push_str(
            [
                " word",
                " 12",
                ",",
                " naïve",
                "  double",
                " 'tis",
                "\n",
                " \u{3000}x",
                " café",
                " x.",
            ][i % 10],
        );
    }
    for tok in added.iter().take(16) {
        s.push_str(tok);
        s.push_str("\nuser says: naïve café 42 ");
        s.push_str(tok);
        s.push_str(" leading space and trailing ");
    }
    s
}
