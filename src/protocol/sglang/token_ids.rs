//! A prompt's token ids as a JSON array, written straight into the body.
//!
//! A long prompt is thousands of ids; through serde's sequence machinery each one costs a call
//! into the formatter, a digit buffer and a `memcpy` of its few bytes (about 60 instructions),
//! and formatting one by hand still costs a few dozen. Here each id's text and comma are looked
//! up, eight bytes at once, and stored whole, the spare bytes cut off again.

use std::sync::LazyLock;

/// Ids below this have their text in `TABLE`: every vocabulary in use (Gemma 3's is 2^18).
const TABLED: u32 = 1 << 18;

/// Each id's digits and a comma, zero-padded to eight bytes, the first digit in the lowest byte
/// (2 MiB, built in a few milliseconds on first use).
static TABLE: LazyLock<Box<[u64]>> = LazyLock::new(|| (0..TABLED).map(digits_and_comma).collect());

/// Bytes written on the stack between copies into the body.
const BLOCK: usize = 512;

/// Appends `[id,id,…]` to `out`.
pub fn write_json(out: &mut Vec<u8>, ids: &[u32]) {
    let table: &[u64] = &TABLE;
    out.reserve(2 + 8 * ids.len());
    out.push(b'[');
    // Written into a block on the stack and copied over when it fills: growing `out` id by id
    // costs more than the lookup.
    let mut block = [0u8; BLOCK];
    let mut at = 0;
    for &id in ids {
        let Some(&text) = table.get(id as usize) else {
            out.extend_from_slice(&block[..at]);
            at = 0;
            out.extend_from_slice(format!("{id},").as_bytes());
            continue;
        };
        block[at..at + 8].copy_from_slice(&text.to_le_bytes());
        // Digits and the comma are never zero bytes: the zeros above them are the padding.
        at += 8 - text.leading_zeros() as usize / 8;
        if at > BLOCK - 8 {
            out.extend_from_slice(&block[..at]);
            at = 0;
        }
    }
    out.extend_from_slice(&block[..at]);
    // The last comma becomes the closing bracket (or, with no ids, the bracket follows `[`).
    match out.last_mut() {
        Some(last) if *last == b',' => *last = b']',
        _ => out.push(b']'),
    }
}

/// `id`'s text and a comma as `TABLE` holds it (`id` < 10^7: seven digits and the comma).
fn digits_and_comma(id: u32) -> u64 {
    let mut text = u64::from(b',');
    let mut n = id;
    loop {
        // Least significant first: each digit goes in at the lowest byte (first in memory) and
        // moves the ones already in, which follow it, up a byte.
        text = text << 8 | u64::from(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            return text;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(ids: &[u32]) -> String {
        let mut out = b"x".to_vec();
        write_json(&mut out, ids);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn matches_serde_json_at_every_digit_count_and_edge() {
        let mut ids = vec![0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 65_535, 151_642];
        for digits in 1..=10u32 {
            let low = 10u64.pow(digits - 1);
            for id in [low, low + 7, low * 10 - 1] {
                ids.push(u32::try_from(id).unwrap_or(u32::MAX));
            }
        }
        ids.push(u32::MAX);
        // Every id below 20,000, and one in seven up to past the six-digit ones.
        ids.extend(0..20_000);
        ids.extend((20_000..1_100_000).step_by(7));
        assert_eq!(
            written(&ids),
            format!("x{}", serde_json::to_string(&ids).unwrap())
        );
        for &id in &ids[..40] {
            assert_eq!(written(&[id]), format!("x[{id}]"));
        }
    }

    #[test]
    fn no_ids_is_an_empty_array() {
        assert_eq!(written(&[]), "x[]");
    }
}
