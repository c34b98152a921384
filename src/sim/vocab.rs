//! The words a simulated worker "generates": real vocabulary entries chosen so that the streamed
//! text re-encodes to exactly the tokens reported (bench_serving's "retokenized" total relies on it).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::tokenize::Tokenizer;

/// Most vocabularies have far more qualifying words; a few thousand is plenty of variety.
const MAX_WORDS: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum VocabError {
    #[error("the tokenizer has no plain-word tokens that re-encode to themselves")]
    NoWords,
    #[error("self-check failed: {0} generated words re-encoded to {1} tokens")]
    SelfCheck(usize, usize),
}

#[derive(Debug)]
pub struct OutputVocab {
    ids: Vec<u32>,
    pieces: Vec<Box<str>>,
    eos: Option<u32>,
}

impl OutputVocab {
    /// Picks tokens that are a word marker (`Ġ` byte-level, `▁` SentencePiece) plus 2–12 ASCII
    /// lowercase letters and encode back to themselves alone. Such words are separate
    /// pre-tokens, so any concatenation of them re-encodes word by word.
    pub fn from_tokenizer(tok: &Tokenizer) -> Result<OutputVocab, VocabError> {
        let mut ids = Vec::new();
        let mut pieces = Vec::new();
        for id in 0..tok.vocab_size() as u32 {
            if pieces.len() == MAX_WORDS {
                break;
            }
            let Some(token) = tok.id_to_token(id) else {
                continue;
            };
            let Some(word) = token.strip_prefix('Ġ').or_else(|| token.strip_prefix('▁')) else {
                continue;
            };
            if !(2..=12).contains(&word.len())
                || !word.bytes().all(|b| b.is_ascii_lowercase())
                || tok.is_special(id)
            {
                continue;
            }
            let piece = format!(" {word}");
            if tok.encode(&piece, false).ok().as_deref() == Some(&[id][..]) {
                ids.push(id);
                pieces.push(piece.into_boxed_str());
            }
        }
        if ids.is_empty() {
            return Err(VocabError::NoWords);
        }
        let vocab = OutputVocab {
            ids,
            pieces,
            eos: tok.eos_token_ids().first().copied(),
        };
        vocab.self_check(tok)?;
        Ok(vocab)
    }

    fn self_check(&self, tok: &Tokenizer) -> Result<(), VocabError> {
        let words = self.draw(0x5eed, 256);
        let text = self.text(&words);
        let n = tok.encode(&text, false).map(|v| v.len()).unwrap_or(0);
        if n != words.len() {
            return Err(VocabError::SelfCheck(words.len(), n));
        }
        Ok(())
    }

    /// `n` word indices drawn deterministically from `seed`.
    pub fn draw(&self, seed: u64, n: usize) -> Vec<u32> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| rng.random_range(0..self.ids.len()) as u32)
            .collect()
    }

    pub fn token_id(&self, word: u32) -> u32 {
        self.ids[word as usize]
    }

    pub fn piece(&self, word: u32) -> &str {
        &self.pieces[word as usize]
    }

    pub fn text(&self, words: &[u32]) -> String {
        let mut s = String::with_capacity(words.len() * 8);
        for &w in words {
            s.push_str(self.piece(w));
        }
        s
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
}
