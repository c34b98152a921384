//! Prompt tokenization by segments, with a cache. Tokenizers split input at special tokens
//! before anything else, so the text between two special tokens encodes the same on its own as
//! inside the whole prompt. A chat prompt is mostly such segments (one per message), and a
//! multi-turn follow-up repeats all of the previous ones: encoding per segment and caching the
//! ids makes the follow-up cost only its new message.
//!
//! Long text between specials (a big system prompt, a document) is cut further into chunks of
//! about `CHUNK_BYTES` at "safe" spaces: a single space between two non-space characters, where
//! GPT-2-style pre-tokenizers always split (" word" starts a new piece) and nothing looks across.
//! The cut points depend only on the text before them, so two prompts that share a long prefix
//! (one system prompt, many questions) share their leading chunks, and those come from the cache.
//!
//! That independence does not hold for every tokenizer (SentencePiece's "prepend ▁ to the
//! first piece" looks at a piece's position in the whole string, and tokens that strip
//! neighbouring whitespace reach across the boundary), so it is checked when the tokenizer
//! loads, on a sample, and segmenting is used only where it gives identical ids.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use super::TokenizeError;

/// Tokens the cache may hold (about 4 bytes each, plus the map's overhead).
const CACHE_BUDGET_TOKENS: usize = 2 * 1024 * 1024;
/// Segments shorter than this are encoded with their neighbours in one plain call: caching them
/// would cost more than it saves.
const MIN_CACHED_BYTES: usize = 256;
/// Target chunk size for long segments.
const CHUNK_BYTES: usize = 512;

type Encode<'a> = &'a dyn Fn(&str) -> Result<Vec<u32>, TokenizeError>;

pub struct Segmenter {
    /// Special tokens that split input: (content, id), longest first so prefixes don't shadow.
    specials: Vec<(String, u32)>,
    /// First bytes of the special tokens, to skip everything else quickly.
    first_bytes: [bool; 256],
    cache: Mutex<TwoGenerations>,
}

/// A bounded cache that keeps what was used recently: when the current generation is full it
/// becomes the previous one and the old previous is dropped; a hit in the previous generation
/// moves the entry forward. O(1), no per-entry bookkeeping.
#[derive(Default)]
struct TwoGenerations {
    current: HashMap<(u64, usize), Arc<[u32]>>,
    previous: HashMap<(u64, usize), Arc<[u32]>>,
    current_tokens: usize,
    previous_tokens: usize,
}

impl TwoGenerations {
    fn get(&mut self, key: (u64, usize)) -> Option<Arc<[u32]>> {
        if let Some(ids) = self.current.get(&key) {
            return Some(Arc::clone(ids));
        }
        let ids = self.previous.remove(&key)?;
        self.previous_tokens -= ids.len();
        self.insert(key, Arc::clone(&ids));
        Some(ids)
    }

    fn insert(&mut self, key: (u64, usize), ids: Arc<[u32]>) {
        if self.current_tokens + ids.len() > CACHE_BUDGET_TOKENS / 2 {
            self.previous = std::mem::take(&mut self.current);
            self.previous_tokens = self.current_tokens;
            self.current_tokens = 0;
        }
        self.current_tokens += ids.len();
        // Two threads that missed the same key both insert it: count it once.
        if let Some(replaced) = self.current.insert(key, ids) {
            self.current_tokens -= replaced.len();
        }
    }
}

impl Segmenter {
    /// `specials`: the added tokens that split input with no whitespace stripping.
    pub fn new(mut specials: Vec<(String, u32)>) -> Segmenter {
        specials.retain(|(s, _)| !s.is_empty());
        specials.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
        let mut first_bytes = [false; 256];
        for (s, _) in &specials {
            first_bytes[s.as_bytes()[0] as usize] = true;
        }
        Segmenter {
            specials,
            first_bytes,
            cache: Mutex::new(TwoGenerations::default()),
        }
    }

    /// Tokens held by the cache, both generations.
    pub fn cached_tokens(&self) -> usize {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.current_tokens + cache.previous_tokens
    }

    /// Ids of `text`. Long segments (text between special tokens) are cut into chunks and served
    /// from the cache; everything else (special tokens and the short text around them) is
    /// encoded in as few plain calls as possible, since each call has a fixed cost.
    pub fn encode(&self, text: &str, encode: Encode<'_>) -> Result<Vec<u32>, TokenizeError> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        let bytes = text.as_bytes();
        // `plain_from`: start of the region not yet encoded; `seg_from`: start of the current segment.
        let (mut plain_from, mut seg_from, mut i) = (0, 0, 0);
        while i < bytes.len() {
            if self.first_bytes[bytes[i] as usize] {
                if let Some((s, _)) = self
                    .specials
                    .iter()
                    .find(|(s, _)| bytes[i..].starts_with(s.as_bytes()))
                {
                    self.segment(
                        text,
                        plain_from..seg_from,
                        seg_from..i,
                        &mut plain_from,
                        &mut ids,
                        encode,
                    )?;
                    i += s.len();
                    seg_from = i;
                    continue;
                }
            }
            i += 1;
        }
        self.segment(
            text,
            plain_from..seg_from,
            seg_from..text.len(),
            &mut plain_from,
            &mut ids,
            encode,
        )?;
        if plain_from < text.len() {
            ids.extend(encode(&text[plain_from..])?);
        }
        Ok(ids)
    }

    /// A segment ended: if it is long, flush the plain region before it and take the segment
    /// from the cache; if short, leave it in the plain region.
    fn segment(
        &self,
        text: &str,
        before: std::ops::Range<usize>,
        seg: std::ops::Range<usize>,
        plain_from: &mut usize,
        ids: &mut Vec<u32>,
        encode: Encode<'_>,
    ) -> Result<(), TokenizeError> {
        if seg.len() < MIN_CACHED_BYTES {
            return Ok(());
        }
        if !before.is_empty() {
            ids.extend(encode(&text[before])?);
        }
        self.push_text(&text[seg.clone()], ids, encode)?;
        *plain_from = seg.end;
        Ok(())
    }

    fn push_text(
        &self,
        seg: &str,
        ids: &mut Vec<u32>,
        encode: Encode<'_>,
    ) -> Result<(), TokenizeError> {
        let mut rest = seg;
        while rest.len() > 2 * CHUNK_BYTES {
            let Some(cut) = safe_cut(rest, CHUNK_BYTES) else {
                break;
            };
            self.push_chunk(&rest[..cut], ids, encode)?;
            rest = &rest[cut..];
        }
        self.push_chunk(rest, ids, encode)
    }

    fn push_chunk(
        &self,
        seg: &str,
        ids: &mut Vec<u32>,
        encode: Encode<'_>,
    ) -> Result<(), TokenizeError> {
        if seg.is_empty() {
            return Ok(());
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seg.hash(&mut h);
        let key = (h.finish(), seg.len());
        let hit = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key);
        let seg_ids = match hit {
            Some(cached) => cached,
            None => {
                let fresh: Arc<[u32]> = encode(seg)?.into();
                self.cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, Arc::clone(&fresh));
                fresh
            }
        };
        ids.extend_from_slice(&seg_ids);
        Ok(())
    }
}

/// The first safe cut at or after `from`: the byte index of a single ASCII space with a
/// non-whitespace character on each side.
fn safe_cut(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while i + 1 < bytes.len() {
        if bytes[i] == b' ' {
            // An ASCII byte is always a char boundary in valid UTF-8.
            let before = text[..i].chars().next_back();
            let after = text[i + 1..].chars().next();
            if before.is_some_and(|c| !c.is_whitespace())
                && after.is_some_and(|c| !c.is_whitespace())
            {
                return Some(i);
            }
        }
        i += 1;
    }
    None
}

/// A sample that exercises every boundary a prompt has: text, specials, newlines, runs of
/// spaces, digits, apostrophes, non-ASCII letters and spaces, and enough of it to be chunked.
pub fn self_check_sample(specials: &[(String, u32)]) -> String {
    let mut s = String::from("Hello there, world 123");
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
    for (tok, _) in specials.iter().take(8) {
        s.push_str(tok);
        s.push_str("\nuser says: naïve café 42 ");
        s.push_str(tok);
        s.push_str(" leading space and trailing ");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytewise(t: &str) -> Result<Vec<u32>, TokenizeError> {
        Ok(t.bytes().map(u32::from).collect())
    }

    #[test]
    fn caches_long_segments_and_batches_the_rest() {
        let seg = Segmenter::new(vec![("<s>".into(), 1), ("<|x|>".into(), 2)]);
        let calls = std::cell::RefCell::new(Vec::new());
        let enc = |t: &str| {
            calls.borrow_mut().push(t.len());
            bytewise(t)
        };
        let long = "a".repeat(300);
        let text = format!("<s>{long}<|x|>b<s>c");
        let ids = seg.encode(&text, &enc).unwrap();
        assert_eq!(ids, bytewise(&text).unwrap(), "same ids as one plain call");
        // "<s>" before the long segment, the long segment, then everything after in one call.
        assert_eq!(*calls.borrow(), vec![3, 300, 10]);
        calls.borrow_mut().clear();
        seg.encode(&text, &enc).unwrap();
        assert_eq!(
            *calls.borrow(),
            vec![3, 10],
            "the long segment came from the cache"
        );
        calls.borrow_mut().clear();
        seg.encode("<s>short<|x|>", &enc).unwrap();
        assert_eq!(
            *calls.borrow(),
            vec![13],
            "short prompts are one plain call"
        );
    }

    fn held_tokens(cache: &TwoGenerations) -> usize {
        let all = cache.current.values().chain(cache.previous.values());
        all.map(|v| v.len()).sum()
    }

    #[test]
    fn cache_stays_within_its_budget_and_counts_what_it_holds() {
        let mut cache = TwoGenerations::default();
        let chunk: Arc<[u32]> = vec![0u32; 1000].into();
        for i in 0..(3 * CACHE_BUDGET_TOKENS / 1000) {
            cache.insert((i as u64, 0), Arc::clone(&chunk));
            let held = held_tokens(&cache);
            assert_eq!(cache.current_tokens + cache.previous_tokens, held);
            assert!(held <= CACHE_BUDGET_TOKENS, "{held}");
        }
        // A hit in the previous generation moves the entry forward without double counting.
        let old_key = *cache.previous.keys().next().unwrap();
        assert!(cache.get(old_key).is_some());
        let held = held_tokens(&cache);
        assert_eq!(cache.current_tokens + cache.previous_tokens, held);
    }

    #[test]
    fn cuts_only_at_single_spaces_between_words() {
        assert_eq!(safe_cut("ab  cd ef", 0), Some(6));
        assert_eq!(safe_cut("ab\u{3000} cd", 0), None);
        let text = "word ".repeat(1000);
        let seg = Segmenter::new(vec![("<s>".into(), 1)]);
        // Chunking never changes the concatenated result of a byte-wise "encoder".
        assert_eq!(
            seg.encode(&text, &bytewise).unwrap(),
            bytewise(&text).unwrap()
        );
    }
}
