//! How many bytes of text one token can cover at most, so that a prompt text can be known to be
//! over the context before it is tokenized (tokenizing a 30 MiB text costs seconds and hundreds
//! of MiB; comparing its length costs nothing).

use tokenizers::models::ModelWrapper;

/// Normalizers (NFKC and the like) can shrink text before the model sees it: full-width "Ａ"
/// (3 bytes) becomes "A". No standard normalizer shrinks more than 4 to 1.
const NORMALIZER_SHRINK: usize = 4;

/// Below this no bound is useful (an unknown character alone can be 4 bytes).
const MIN_BOUND: usize = 16;

/// The most bytes of input text a single token can stand for, or `None` where the model has no
/// such bound: a fused unknown token (BPE `fuse_unk`, Unigram without byte fallback) or a
/// word-level model's unknown word covers any length of text.
///
/// Every token's vocabulary string is at least as long as the bytes it decodes to (byte-level
/// BPE writes each byte as a one- or two-byte character, Metaspace writes a space as the
/// three-byte "▁", byte-fallback tokens are `<0xNN>`), so the longest entry bounds a token;
/// a normalizer may shrink the input by up to [`NORMALIZER_SHRINK`] first.
pub(crate) fn bytes_per_token_bound(hf: &tokenizers::Tokenizer) -> Option<usize> {
    let floor = match hf.get_model() {
        ModelWrapper::BPE(bpe) if bpe.fuse_unk && bpe.unk_token.is_some() && !bpe.byte_fallback => {
            return None
        }
        ModelWrapper::Unigram(u) if !u.byte_fallback() => return None,
        ModelWrapper::WordLevel(_) => return None,
        // An unknown word becomes one [UNK], up to this many characters of up to 4 bytes.
        ModelWrapper::WordPiece(wp) => wp.max_input_chars_per_word.saturating_mul(4),
        _ => MIN_BOUND,
    };
    let longest = hf
        .get_vocab(true)
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(0);
    let shrink = if hf.get_normalizer().is_some() {
        NORMALIZER_SHRINK
    } else {
        1
    };
    Some(longest.max(floor).max(MIN_BOUND).saturating_mul(shrink))
}

#[cfg(test)]
mod tests {
    use crate::tokenize::tests::{load, ALL};

    /// The text bound must never reject a prompt that fits: no token of any shipped tokenizer
    /// stands for more text than the bound, checked on each token alone and on texts that pack many
    /// bytes into few tokens (runs of spaces and symbols, long words, full-width and combining
    /// characters that a normalizer folds).
    #[test]
    fn no_token_covers_more_text_than_the_bound() {
        let samples = [
            " ".repeat(4000),
            "=".repeat(4000),
            "\n".repeat(999),
            "-".repeat(3000) + "\t\t\t" + &"_".repeat(2000),
            "Ａ".repeat(500) + &"e\u{301}".repeat(500),
            "internationalization ".repeat(200),
            "0".repeat(1000),
        ];
        for name in ALL {
            let tok = load(name);
            let bound = tok
                .max_bytes_per_token()
                .expect("BPE tokenizers have a bound");
            for id in 0..tok.vocab_size() as u32 {
                let text = tok.decode(&[id], false).unwrap_or_default();
                assert!(
                    text.len() <= bound,
                    "{name}: token {id} {text:?} over {bound}"
                );
            }
            for text in &samples {
                let n = tok.encode(text, false).unwrap().len().max(1);
                assert!(
                    text.len() <= n * bound,
                    "{name}: {} bytes in {n} tokens",
                    text.len()
                );
            }
        }
    }
}
