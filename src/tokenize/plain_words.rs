//! A plain word's ids straight from a byte-level BPE model. Encoding one unseen word through the
//! whole `tokenizers` pipeline costs ~40 K instructions (added-token split, the pre-tokenizer's
//! regular expression on a backtracking engine, offsets, post-processing, an `Encoding`); the
//! BPE merges, the only step that decides the ids, cost ~9 K of that. A piece the prompt cutter
//! makes that is a run of ASCII letters with at most a leading space, and no lower-case letter
//! before an upper-case one (` word`, ` Word`, ` WORD`), is one pre-token under every byte-level
//! regex in use (GPT-2's, Llama 3's, Qwen's, o200k's, which splits `camelCase`); byte-level
//! mapping leaves letters as they are and turns the space into one character. So its ids are
//! the model's tokens for the mapped piece.
//!
//! The merges themselves are applied here (`merges`), on integers.
//!
//! That is checked when the tokenizer loads, against the whole pipeline, on words of every case
//! pattern and many lengths: a tokenizer that is not byte-level BPE, or whose normalizer,
//! pre-tokenizer or post-processor treats such words otherwise, fails the check and keeps the
//! whole pipeline.

mod merges;

use std::sync::Arc;

use tokenizers::{Model, ModelWrapper, OffsetReferential, OffsetType, PreTokenizer};

use merges::Merges;

/// The quick path for plain words, for one tokenizer.
#[derive(Clone)]
pub struct PlainWords {
    /// What byte-level mapping makes of a space (GPT-2's alphabet: `Ġ`).
    space: char,
    merges: Arc<Merges>,
}

impl PlainWords {
    /// `Some` where the quick path gives the pipeline's ids on the check sample.
    pub fn new(hf: &tokenizers::Tokenizer) -> Option<PlainWords> {
        let ModelWrapper::BPE(bpe) = hf.get_model() else {
            return None;
        };
        // An added token made of letters only could sit inside a plain word; one with any other
        // character cannot.
        let added = hf.get_added_tokens_decoder();
        if added.values().any(|t| is_letters(&t.content)) {
            return None;
        }
        let space = byte_level_space()?;
        let words = PlainWords {
            space,
            merges: Arc::new(Merges::new(bpe, space)?),
        };
        let agrees = |word: &str| {
            let pipeline = hf.encode_fast(word, false);
            let quick = words.encode(hf, word);
            matches!((pipeline, quick), (Ok(p), Some(q)) if p.get_ids() == q.as_slice())
        };
        check_sample().iter().all(|w| agrees(w)).then_some(words)
    }

    /// The ids of `piece`, or `None` if it is not a plain word.
    pub fn encode(&self, hf: &tokenizers::Tokenizer, piece: &str) -> Option<Vec<u32>> {
        self.encode_many(hf, &[piece]).pop().flatten()
    }

    /// The ids of each of `pieces` (`None` for those that are not plain words), their merges
    /// run together (`merges`).
    pub fn encode_many(
        &self,
        hf: &tokenizers::Tokenizer,
        pieces: &[&str],
    ) -> Vec<Option<Vec<u32>>> {
        let mut out = vec![None; pieces.len()];
        let ModelWrapper::BPE(bpe) = hf.get_model() else {
            return out;
        };
        // The plain words left to merge, and where each one's ids go in `out`.
        let mut words: Vec<&[u8]> = Vec::with_capacity(pieces.len());
        let mut at: Vec<usize> = Vec::with_capacity(pieces.len());
        for (k, piece) in pieces.iter().enumerate() {
            let word = piece.strip_prefix(' ');
            if !is_plain(word.unwrap_or(piece)) {
                continue;
            }
            if self.merges.ignores_merges() {
                let mapped = match word {
                    Some(word) => format!("{}{word}", self.space),
                    None => (*piece).to_owned(),
                };
                if let Some(id) = bpe.token_to_id(&mapped) {
                    out[k] = Some(vec![id]);
                    continue;
                }
            }
            words.push(piece.as_bytes());
            at.push(k);
        }
        for (&k, ids) in at.iter().zip(self.merges.encode_many(&words)) {
            if let Some(slot) = out.get_mut(k) {
                *slot = ids;
            }
        }
        out
    }
}

fn is_letters(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic())
}

/// ASCII letters, upper case (if any) before lower case (if any).
fn is_plain(word: &str) -> bool {
    let lower = word.trim_start_matches(|c: char| c.is_ascii_uppercase());
    !word.is_empty() && lower.bytes().all(|b| b.is_ascii_lowercase())
}

/// The character `tokenizers`' own byte-level pre-tokenizer maps a space to.
fn byte_level_space() -> Option<char> {
    let mut pre = tokenizers::PreTokenizedString::from(" ");
    let byte_level = tokenizers::pre_tokenizers::byte_level::ByteLevel::new(false, false, false);
    byte_level.pre_tokenize(&mut pre).ok()?;
    let splits = pre.get_splits(OffsetReferential::Normalized, OffsetType::None);
    let (mapped, _, _) = splits.first()?;
    let mut chars = mapped.chars();
    chars.next().filter(|_| chars.next().is_none())
}

/// Plain words of each case pattern, with and without the leading space, from one letter to
/// longer than any vocabulary entry, and some real ones (whole-word vocabulary entries).
fn check_sample() -> Vec<String> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut letters = |n: usize| -> String {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect()
    };
    let mut out: Vec<String> = ["the", "Hello", "WORLD", "I", "a", "Zebra", "don", "USA"]
        .into_iter()
        .map(String::from)
        .collect();
    for n in (1..=12).chain([16, 24, 40]) {
        for _ in 0..3 {
            let word = letters(n);
            let mut capital = word.clone();
            capital[..1].make_ascii_uppercase();
            out.extend([word.to_ascii_uppercase(), capital, word]);
        }
    }
    let spaced: Vec<String> = out.iter().map(|w| format!(" {w}")).collect();
    out.extend(spaced);
    out
}

#[cfg(test)]
mod tests;
