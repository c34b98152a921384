//! A prompt's token ids as a JSON array, written straight into the body.
//!
//! A long prompt is thousands of ids; through serde's sequence machinery each one costs a call
//! into the formatter, a digit buffer and a `memcpy` of its few bytes (about 60 instructions).
//! Here an id and its comma are built in one `u64` and stored as eight bytes, the spare ones
//! cut off again.

/// "00", "01", … "99": two digits per lookup.
const PAIRS: [u8; 200] = {
    let mut table = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        table[2 * i] = b'0' + (i / 10) as u8;
        table[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    table
};

/// Appends `[id,id,…]` to `out`.
pub fn write_json(out: &mut Vec<u8>, ids: &[u32]) {
    out.reserve(2 + 7 * ids.len());
    out.push(b'[');
    for &id in ids {
        push_with_comma(out, id);
    }
    // The last comma becomes the closing bracket (or, with no ids, the bracket follows `[`).
    match out.last_mut() {
        Some(last) if *last == b',' => *last = b']',
        _ => out.push(b']'),
    }
}

fn push_with_comma(out: &mut Vec<u8>, id: u32) {
    // Seven digits and the comma fill the word; no vocabulary comes near ten million.
    if id >= 10_000_000 {
        out.extend_from_slice(format!("{id},").as_bytes());
        return;
    }
    // Little-endian: byte 0 is the leading digit, so digits go in from the right as the word
    // shifts left, the comma first.
    let mut word = u64::from(b',');
    let mut len = 1;
    let mut n = id as usize;
    while n >= 100 {
        word = (word << 16) | pair(n % 100);
        len += 2;
        n /= 100;
    }
    if n >= 10 {
        word = (word << 16) | pair(n);
        len += 2;
    } else {
        word = (word << 8) | u64::from(b'0' + n as u8);
        len += 1;
    }
    let end = out.len() + len;
    out.extend_from_slice(&word.to_le_bytes());
    out.truncate(end);
}

/// Digits of `n` (< 100) as two bytes, the tens first in memory.
fn pair(n: usize) -> u64 {
    u64::from(u16::from_le_bytes([PAIRS[2 * n], PAIRS[2 * n + 1]]))
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
        // Every id below 200,000 once, in one array, and each on its own.
        ids.extend(0..200_000);
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
