//! Prompt tokenization piece by piece, with a cache. Tokenizers split input at special tokens
//! before anything else, and GPT-2-style pre-tokenizers always start a new piece at a single
//! space between two non-space characters (" word"): nothing the tokenizer does looks across
//! either boundary. So a prompt can be cut there into pieces (about one word each) whose ids
//! concatenate to the prompt's ids, and each piece's ids can be cached. Prompts repeat words,
//! system prompts and whole earlier turns, so most pieces come from the cache and only the new
//! ones reach the tokenizer, which costs microseconds per call even for a few bytes.
//!
//! Tokenizers that split numbers into single digits (SmolLM2, Qwen2) allow a cut between two
//! digits too, so the numbers every prompt carries (dates, ids, counters) are cache hits; that
//! cut is only used where the self-check shows it holds (Llama 3 groups digits by three).
//!
//! Pieces the cache lacks are encoded alone where the tokenizer has a quick way for them (plain
//! words: `plain_words`), the others together, one tokenizer call per run of up to `RUN_BYTES`,
//! split back into pieces by the tokens' byte offsets.
//!
//! That independence does not hold for every tokenizer (SentencePiece's "prepend ▁ to the
//! first piece" looks at a piece's position in the whole string, and tokens that strip
//! neighbouring whitespace reach across the boundary), so it is checked when the tokenizer
//! loads, on a sample, and piecewise encoding is used only where it gives identical ids.

use std::collections::HashMap;
use std::ops::Range;

use aho_corasick::{AhoCorasick, MatchKind};
use parking_lot::{Mutex, MutexGuard};

use super::TokenizeError;
use cache::{Hasher, TwoGenerations};
use cuts::pieces;
pub use cuts::self_check_sample;

/// Text between two special tokens at least this long is also cached whole once it repeats: a
/// multi-turn follow-up then costs one lookup per earlier message instead of one per word.
const MIN_SEGMENT_BYTES: usize = 256;
/// Missing pieces are encoded in one call per run of about this many bytes: enough to amortise
/// the call's fixed cost (a piece missing twice in one text is encoded once).
const RUN_BYTES: usize = 512;

/// Pieces looked up or inserted per hold of the cache lock. A big prompt has millions of
/// pieces: between batches the lock is handed to any waiting thread (`MutexGuard::bump`), so a
/// small prompt waits microseconds behind a big one, not the big one's whole lookup.
const PIECES_PER_LOCK: usize = 256;

/// Token ids with the byte offset (in the encoded text) each token starts at.
pub type Encoded = Vec<(u32, usize)>;

/// The tokenizer, as the segmenter asks it for the pieces the cache lacks.
pub trait Encode {
    /// Ids of `text` (several pieces run together) with the offset each token starts at.
    fn with_offsets(&self, text: &str) -> Result<Encoded, TokenizeError>;

    /// Ids of each of `pieces` by a quicker way than `with_offsets`, where there is one for it
    /// (`None` for the others), all asked at once so the quick way can work on them together.
    fn pieces(&self, pieces: &[&str]) -> Vec<Option<Vec<u32>>> {
        vec![None; pieces.len()]
    }
}

impl<F: Fn(&str) -> Result<Encoded, TokenizeError>> Encode for F {
    fn with_offsets(&self, text: &str) -> Result<Encoded, TokenizeError> {
        self(text)
    }
}

pub struct Segmenter {
    /// Finds the special tokens that split input, the longest where several start at one place.
    specials: AhoCorasick,
    /// Each special token's id, by pattern index.
    special_ids: Vec<u32>,
    /// Also cut between two ASCII digits.
    digit_cuts: bool,
    cache: Mutex<TwoGenerations>,
}

impl Segmenter {
    /// `specials`: the added tokens that split input with no whitespace stripping.
    pub fn new(mut specials: Vec<(String, u32)>) -> Result<Segmenter, TokenizeError> {
        specials.retain(|(s, _)| !s.is_empty());
        // One automaton pass finds them all: the prompt's bytes are skipped with a vectorised
        // search for the tokens' first bytes, not looked at one by one.
        let finder = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(specials.iter().map(|(s, _)| s))
            .map_err(|e| TokenizeError::Encode(format!("special tokens: {e}")))?;
        Ok(Segmenter {
            specials: finder,
            special_ids: specials.iter().map(|&(_, id)| id).collect(),
            digit_cuts: false,
            cache: Mutex::new(TwoGenerations::default()),
        })
    }

    /// The same, also cutting between two digits (for tokenizers that split numbers into digits).
    pub fn with_digit_cuts(self) -> Segmenter {
        Segmenter {
            digit_cuts: true,
            ..self
        }
    }

    /// Whether it also cuts between digits.
    pub fn digit_cuts(&self) -> bool {
        self.digit_cuts
    }

    /// Estimated bytes held by the cache, both generations.
    pub fn cached_bytes(&self) -> usize {
        self.lock().bytes()
    }

    fn lock(&self) -> MutexGuard<'_, TwoGenerations> {
        self.cache.lock()
    }

    /// Ids of `text`: special tokens by their id, the text between them piece by piece.
    pub fn encode(&self, text: &str, encode: &dyn Encode) -> Result<Vec<u32>, TokenizeError> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let mut from = 0;
        for special in self.specials.find_iter(text) {
            let id = self.special_ids.get(special.pattern().as_usize()).copied();
            let id = id.ok_or_else(|| TokenizeError::Encode("unknown special token".into()))?;
            self.encode_text(&text[from..special.start()], &mut ids, encode)?;
            ids.push(id);
            from = special.end();
        }
        self.encode_text(&text[from..], &mut ids, encode)?;
        Ok(ids)
    }

    /// Text without special tokens: a long one whole from the cache if it is there, else piece
    /// by piece (and then cached whole too).
    fn encode_text(
        &self,
        text: &str,
        ids: &mut Vec<u32>,
        encode: &dyn Encode,
    ) -> Result<(), TokenizeError> {
        if text.len() < MIN_SEGMENT_BYTES {
            return self.encode_pieces(text, ids, encode);
        }
        let mut cache = self.lock();
        if cache.copy_into(text.as_bytes(), ids) {
            return Ok(());
        }
        let repeated = cache.seen_before(text);
        drop(cache);
        let from = ids.len();
        self.encode_pieces(text, ids, encode)?;
        if repeated {
            self.lock().insert(text.as_bytes(), &ids[from..]);
        }
        Ok(())
    }

    /// Cached pieces are copied straight into `ids` (most prompts' pieces all are); a missing
    /// one is noted with the place its ids belong and filled in afterwards.
    fn encode_pieces(
        &self,
        text: &str,
        ids: &mut Vec<u32>,
        encode: &dyn Encode,
    ) -> Result<(), TokenizeError> {
        let base = ids.len();
        let mut missing: Vec<Miss> = Vec::new();
        {
            let mut cache = self.lock();
            for (n, range) in pieces(text, self.digit_cuts).enumerate() {
                if n % PIECES_PER_LOCK == PIECES_PER_LOCK - 1 {
                    MutexGuard::bump(&mut cache);
                }
                if !cache.copy_into(&text.as_bytes()[range.clone()], ids) {
                    let at = ids.len() - base;
                    missing.push(Miss {
                        range,
                        piece: n,
                        at,
                    });
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        self.fill_missing(text, ids, base, &missing, encode)
    }

    /// Encodes the missing pieces (one concatenation per run: where two missing pieces meet
    /// there is again a single space between two non-space characters, so the concatenation
    /// encodes to the pieces' ids one after the other; a piece missing twice is encoded once),
    /// puts their ids in place among the cached ones after `base`, and caches them.
    fn fill_missing(
        &self,
        text: &str,
        ids: &mut Vec<u32>,
        base: usize,
        missing: &[Miss],
        encode: &dyn Encode,
    ) -> Result<(), TokenizeError> {
        // `unique`: the first occurrence (index into `missing`) of each distinct missing text;
        // `which[k]`: the distinct text `missing[k]` is.
        // Sized for them all at once: grown insert by insert, it was rehashed several times a
        // long prompt.
        let mut first: HashMap<&str, usize, Hasher> =
            HashMap::with_capacity_and_hasher(missing.len(), Hasher::default());
        let mut unique: Vec<usize> = Vec::with_capacity(missing.len());
        let mut which: Vec<usize> = Vec::with_capacity(missing.len());
        for (k, miss) in missing.iter().enumerate() {
            let next = unique.len();
            let u = *first.entry(&text[miss.range.clone()]).or_insert(next);
            if u == next {
                unique.push(k);
            }
            which.push(u);
        }
        // `encoded[u]`: the ids of `unique[u]`; pieces with a quick way are encoded alone, the
        // others (`slow`) together in runs.
        let missing_text = |u: usize| &text[missing[unique[u]].range.clone()];
        let mut encoded: Vec<Option<Vec<u32>>> = vec![None; unique.len()];
        let mut slow = Vec::new();
        let texts: Vec<&str> = (0..unique.len()).map(missing_text).collect();
        let mut quick = encode.pieces(&texts).into_iter();
        for (u, slot) in encoded.iter_mut().enumerate() {
            match quick.next().flatten() {
                Some(ids) => *slot = Some(ids),
                None => slow.push(u),
            }
        }
        for run in runs(text, missing, &unique, &slow) {
            let mut joined = String::new();
            let mut starts = Vec::with_capacity(run.len());
            for &u in run {
                starts.push(joined.len());
                joined.push_str(missing_text(u));
            }
            match split_by_offsets(&encode.with_offsets(&joined)?, &starts, joined.len()) {
                Some(split) => {
                    for (&u, ids) in run.iter().zip(split) {
                        encoded[u] = Some(ids);
                    }
                }
                // The offsets did not line up with the cuts: encode these pieces one by one.
                None => {
                    for &u in run {
                        let one = encode.with_offsets(missing_text(u))?;
                        encoded[u] = Some(one.iter().map(|&(id, _)| id).collect());
                    }
                }
            }
        }
        let unencoded = || TokenizeError::Encode("a prompt piece was left unencoded".into());
        // The cached ids after `base` move apart to make room, in one pass.
        let hits = ids.split_off(base);
        let mut from = 0;
        for (miss, &u) in missing.iter().zip(&which) {
            let new = encoded
                .get(u)
                .and_then(Option::as_ref)
                .ok_or_else(unencoded)?;
            ids.extend_from_slice(&hits[from..miss.at]);
            ids.extend_from_slice(new);
            from = miss.at;
        }
        ids.extend_from_slice(&hits[from..]);
        let mut cache = self.lock();
        for (n, (&k, piece_ids)) in unique.iter().zip(&encoded).enumerate() {
            if n % PIECES_PER_LOCK == PIECES_PER_LOCK - 1 {
                MutexGuard::bump(&mut cache);
            }
            let piece_ids = piece_ids.as_deref().ok_or_else(unencoded)?;
            let piece = &text.as_bytes()[missing[k].range.clone()];
            cache.insert(piece, piece_ids);
        }
        Ok(())
    }
}

/// A piece the cache lacked.
struct Miss {
    /// Where it is in the text.
    range: Range<usize>,
    /// Which piece of the text it is (0, 1, …).
    piece: usize,
    /// How many cached ids come before it (counted from where this text's ids start).
    at: usize,
}

/// The distinct missing pieces in `slow` (indices into `unique`, which indexes `missing`) in
/// groups of about `RUN_BYTES` of text. A piece cut off between two digits starts a new group
/// unless it follows its neighbour in the text: only a digit is known to be safe before it.
fn runs<'s>(text: &str, missing: &[Miss], unique: &[usize], slow: &'s [usize]) -> Vec<&'s [usize]> {
    let miss = |u: usize| unique.get(u).and_then(|&k| missing.get(k));
    let starts_with_digit = |u: usize| {
        miss(u)
            .and_then(|miss| text.as_bytes().get(miss.range.start))
            .is_some_and(u8::is_ascii_digit)
    };
    let piece = |u: usize| miss(u).map(|miss| miss.piece);
    let mut out = Vec::new();
    let mut rest = slow;
    while !rest.is_empty() {
        let mut bytes = 0;
        let mut previous: Option<usize> = None;
        let n = rest
            .iter()
            .take_while(|&&u| {
                let neighbours = |p: usize| piece(p).zip(piece(u)).is_some_and(|(a, b)| a + 1 == b);
                let joins = previous.is_none_or(|p| neighbours(p) || !starts_with_digit(u));
                let fits = bytes < RUN_BYTES && joins;
                bytes += miss(u).map_or(0, |miss| miss.range.len());
                previous = Some(u);
                fits
            })
            .count();
        let (run, tail) = rest.split_at(n);
        out.push(run);
        rest = tail;
    }
    out
}

/// Each piece's share of `encoded` (a token belongs to the piece its first byte is in), or
/// `None` if some piece got no token.
fn split_by_offsets(encoded: &Encoded, starts: &[usize], end: usize) -> Option<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(starts.len());
    let mut tokens = encoded.iter().peekable();
    for k in 0..starts.len() {
        let stop = starts.get(k + 1).copied().unwrap_or(end);
        let mut piece_ids = Vec::new();
        while let Some(&&(id, off)) = tokens.peek() {
            if off >= stop {
                break;
            }
            piece_ids.push(id);
            tokens.next();
        }
        if piece_ids.is_empty() {
            return None;
        }
        out.push(piece_ids);
    }
    Some(out)
}

mod cache;
mod cuts;
#[cfg(test)]
mod tests;
