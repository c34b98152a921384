//! A byte-level BPE model's merges, applied to a plain word here rather than by `tokenizers`,
//! whose per-word path builds a string per character for its vocabulary lookups, a heap, a
//! `Token` (with its string) per result and an entry in its own cache: ~7 K instructions for an
//! unseen eight-letter word, against ~1.8 K for the same merges on a few integers here.
//!
//! The rule is the model's: merge the adjacent pair of lowest rank, the leftmost of equals, until
//! no pair has a merge. (`tokenizers` keeps candidate pairs in a heap and skips those a merge has
//! made stale; a stale entry can never pass for a live one, because the merged token's text is
//! the pair's text and symbols only grow, so the order is the same.) The load-time check and the
//! tests compare the ids with the whole pipeline's.
//!
//! A prompt's unseen words are merged together, one merge of each word per round. Each merge
//! looks its new pairs up in a map too big to stay in cache (~1 MB for 49 K merges), and the
//! next merge of the same word waits for those lookups; word after word, a prompt's unseen
//! words waited for each miss in turn (~650 ns a word in `perf`, about half of it on loading
//! the map's buckets). In rounds, the lookups of different words are independent and their
//! misses overlap.

use std::collections::HashMap;

use serde::Deserialize;
use tokenizers::models::bpe::BPE;
use tokenizers::Model;

type Hasher = foldhash::fast::RandomState;

/// One merge: its rank (lower merges first) and the id of the merged token.
#[derive(Clone, Copy)]
struct Merge {
    rank: u32,
    id: u32,
}

/// The merges of one BPE model, for words of ASCII letters with at most a leading space.
pub struct Merges {
    /// The id of each ASCII byte's byte-level character (`None` outside letters and the space).
    bytes: [Option<u32>; 128],
    pairs: HashMap<(u32, u32), Merge, Hasher>,
    /// The model takes a whole-word vocabulary entry as it is, without merging (Llama 3).
    ignore_merges: bool,
}

/// The parts of the model's serialized form read here.
#[derive(Deserialize)]
struct Serialized {
    merges: Vec<(String, String)>,
}

impl Merges {
    /// `None` where the model does more to a word than merge: dropout, subword affixes, or a
    /// letter or the space (as `space` maps it) missing from the vocabulary.
    pub fn new(bpe: &BPE, space: char) -> Option<Merges> {
        // Qwen's files give both affixes as empty strings.
        let affix = |a: &Option<String>| a.as_ref().is_some_and(|a| !a.is_empty());
        if bpe.dropout.is_some()
            || affix(&bpe.continuing_subword_prefix)
            || affix(&bpe.end_of_word_suffix)
        {
            return None;
        }
        // `tokenizers` keeps its merge table private; its serialized form lists the merges in
        // rank order.
        let serialized: Serialized = serde_json::to_vec(bpe)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())?;
        let mut bytes = [None; 128];
        for b in (b'a'..=b'z').chain(b'A'..=b'Z') {
            bytes[usize::from(b)] = Some(bpe.token_to_id(char::from(b).encode_utf8(&mut [0; 4]))?);
        }
        bytes[usize::from(b' ')] = Some(bpe.token_to_id(space.encode_utf8(&mut [0; 4]))?);
        let mut pairs =
            HashMap::with_capacity_and_hasher(serialized.merges.len(), Hasher::default());
        for (rank, (left, right)) in serialized.merges.iter().enumerate() {
            let ids = (
                bpe.token_to_id(left),
                bpe.token_to_id(right),
                bpe.token_to_id(&format!("{left}{right}")),
            );
            let (Some(l), Some(r), Some(id)) = ids else {
                return None;
            };
            let rank = u32::try_from(rank).ok()?;
            // A pair listed twice keeps its later rank, as `tokenizers` does.
            pairs.insert((l, r), Merge { rank, id });
        }
        Some(Merges {
            bytes,
            pairs,
            ignore_merges: bpe.ignore_merges,
        })
    }

    /// Whether the model looks a whole word up in its vocabulary before merging (Llama 3): the
    /// caller does that, with the word spelled as the vocabulary spells it.
    pub fn ignores_merges(&self) -> bool {
        self.ignore_merges
    }

    /// The ids of each of `words` (ASCII letters, at most a leading space): `None` for a word
    /// with any other byte.
    pub fn encode_many(&self, words: &[&[u8]]) -> Vec<Option<Vec<u32>>> {
        let letters = words.iter().map(|w| w.len()).sum();
        let mut batch = Batch::with_capacity(letters, words.len());
        let started: Vec<Option<usize>> = words.iter().map(|w| batch.start(self, w)).collect();
        let mut merging: Vec<usize> = started.iter().flatten().copied().collect();
        while !merging.is_empty() {
            merging.retain(|&w| batch.merge_once(self, w));
        }
        started
            .into_iter()
            .map(|w| w.map(|w| batch.symbols_of(w)))
            .collect()
    }

    /// The merge of the pair `(left, right)`, if the model has one.
    #[inline]
    fn merge_of(&self, left: u32, right: u32) -> Option<Merge> {
        self.pairs.get(&(left, right)).copied()
    }
}

/// Every word of one `encode_many` call being merged, in shared arrays: a word's symbols and
/// pair merges are a span of them that shrinks by one at each merge. A vector per word for each
/// cost two allocations a word, and the result a reallocation to its final length.
struct Batch {
    symbols: Vec<u32>,
    /// `merges[i]`: the merge of `symbols[i]` and `symbols[i + 1]` within a word, if any (a
    /// word's last slot is never read).
    merges: Vec<Option<Merge>>,
    /// Each word's span: its first slot and its number of symbols.
    words: Vec<(usize, usize)>,
}

impl Batch {
    fn with_capacity(letters: usize, words: usize) -> Batch {
        Batch {
            symbols: Vec::with_capacity(letters),
            merges: Vec::with_capacity(letters),
            words: Vec::with_capacity(words),
        }
    }

    /// Adds a word's letters as symbols, with the merges of each adjacent pair; `None` (and
    /// nothing added) for a word with a byte the model has no symbol for.
    fn start(&mut self, model: &Merges, word: &[u8]) -> Option<usize> {
        let first = self.symbols.len();
        for &b in word {
            match model.bytes.get(usize::from(b)).copied().flatten() {
                Some(id) => self.symbols.push(id),
                None => {
                    self.symbols.truncate(first);
                    return None;
                }
            }
        }
        let added = &self.symbols[first..];
        let pairs = added.windows(2).map(|w| model.merge_of(w[0], w[1]));
        // One entry per symbol: the last one's is never read.
        let pairs = pairs.chain(std::iter::once(None)).take(added.len());
        self.merges.extend(pairs);
        self.words.push((first, word.len()));
        Some(self.words.len() - 1)
    }

    /// Applies word `w`'s next merge (its lowest rank, the leftmost of equals); `false` once it
    /// has none left.
    fn merge_once(&mut self, model: &Merges, w: usize) -> bool {
        let Some(&(first, len)) = self.words.get(w) else {
            return false;
        };
        let (Some(symbols), Some(merges)) = (
            self.symbols.get_mut(first..first + len),
            self.merges.get_mut(first..first + len),
        ) else {
            return false;
        };
        let mut best: Option<(usize, Merge)> = None;
        for (i, m) in merges[..len.saturating_sub(1)].iter().enumerate() {
            if let Some(m) = *m {
                if best.is_none_or(|(_, b)| m.rank < b.rank) {
                    best = Some((i, m));
                }
            }
        }
        let Some((i, m)) = best else {
            return false;
        };
        // The right symbol goes: the span's tail moves down one slot.
        symbols[i] = m.id;
        symbols.copy_within(i + 2.., i + 1);
        merges.copy_within(i + 1.., i);
        let len = len - 1;
        if i > 0 {
            merges[i - 1] = model.merge_of(symbols[i - 1], symbols[i]);
        }
        if i + 1 < len {
            merges[i] = model.merge_of(symbols[i], symbols[i + 1]);
        }
        if let Some(word) = self.words.get_mut(w) {
            word.1 = len;
        }
        true
    }

    /// Word `w`'s symbols, in a vector of exactly their number.
    fn symbols_of(&self, w: usize) -> Vec<u32> {
        self.words
            .get(w)
            .and_then(|&(first, len)| self.symbols.get(first..first + len))
            .map_or_else(Vec::new, <[u32]>::to_vec)
    }
}
