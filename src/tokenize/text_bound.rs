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
