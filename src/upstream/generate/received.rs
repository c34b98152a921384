//! What one `/generate` stream chunk adds, whichever of SGLang's streaming modes the worker runs.
//!
//! SGLang's real modes (`/work/shared/docs/sglang-wire.md` §1.4):
//! - default, 0.5.9 and 0.5.23: cumulative `text`, cumulative `output_ids`;
//! - 0.5.23 `--incremental-streaming-output`: delta `text`, delta `output_ids`;
//! - 0.5.9 `--stream-output`: cumulative `text`, delta `output_ids`.
//!
//! So the two are decided separately, each from its own evidence, never one from the other:
//! - **ids** from the counts: after the first chunk, a cumulative list holds
//!   `meta_info.completion_tokens` ids, a delta list holds `completion_tokens` − (ids so far).
//!   With ids received both cannot hold, so this is exact; when the counts fit neither (a worker
//!   that leaves `completion_tokens` out), a list that repeats the ids so far is cumulative.
//! - **text** from the text: cumulative text only ever extends what it sent, so a non-empty
//!   text that does not start with all the text so far is a delta, and the stream is then
//!   read as deltas to its end (a worker's mode does not change mid-stream). A text that does
//!   start with all the text so far is read as cumulative: that is every chunk of the two
//!   cumulative modes. An empty text says nothing (no new text in either mode, e.g. a held-back
//!   partial character). The first text is the whole text so far in both modes.
//!   The one case this misreads: under `--incremental-streaming-output`, a delta that begins
//!   with everything received so far (e.g. "\n" then "\n") before any delta proved the mode.
//!   One step's text rarely holds the whole answer so far, so this can only happen in the first
//!   steps; preferring the delta reading instead would duplicate the whole text on every chunk
//!   of 0.5.9 `--stream-output`, which is the common case of the two.

use serde::Deserialize;
use serde_json::value::RawValue;

/// A chunk's `text` or `output_ids` as sent: the whole value, or only what it added to the same
/// value of the chunk before (cut so by `splice`, which does that only for a value that was all
/// of it so far: see [`Received::continues`]).
#[derive(Debug, Clone, Copy)]
pub enum Sent<'a> {
    Whole(&'a RawValue),
    Added(&'a RawValue),
}

/// The text and ids received so far on one stream.
#[derive(Debug, Default)]
pub struct Received {
    /// All text so far, kept only while the text may be cumulative (for the prefix check).
    text: String,
    /// A chunk proved the text to be deltas.
    text_is_delta: bool,
    /// Every output id so far.
    ids: Vec<u32>,
    /// The last chunk's ids as parsed (kept for its capacity).
    parsed: Vec<u32>,
    /// Whether the last chunk's text and ids, as sent, were all of them so far.
    continues: Continues,
}

/// Which of the last chunk's values were all of that value so far: the next chunk may repeat
/// them and add to them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Continues {
    pub text: bool,
    pub ids: bool,
}

/// Output tokens the buffers have room for from the start: a short answer is never regrown
/// token by token, a long one starts from this, and an idle stream holds a few KiB at most.
const ROOM_TOKENS: usize = 256;

impl Received {
    /// Room for an answer of up to `max_tokens` (as far as `ROOM_TOKENS`).
    pub fn with_room(max_tokens: usize) -> Received {
        let tokens = max_tokens.min(ROOM_TOKENS);
        Received {
            // Most tokens are a word or less: four bytes each, then grown if need be.
            text: String::with_capacity(4 * tokens),
            ids: Vec::with_capacity(tokens),
            ..Received::default()
        }
    }

    /// Takes in one chunk's `text` and `output_ids`; returns its new text (`None` when the chunk
    /// has no `text` field) and how many of [`Received::ids`]' last ids it added.
    pub fn take(
        &mut self,
        text: Option<Sent<'_>>,
        ids: Option<Sent<'_>>,
        completion_tokens: u32,
    ) -> Result<(Option<String>, usize), serde_json::Error> {
        let before = self.ids.len();
        self.continues.ids = match ids {
            Some(ids) => self.take_ids(ids, completion_tokens as usize)?,
            None => false,
        };
        let added = self.ids.len().saturating_sub(before);
        let text = match text {
            Some(t) => Some(self.take_text(t)?),
            None => {
                self.continues.text = false;
                None
            }
        };
        Ok((text, added))
    }

    /// Which of the values just taken were all of that value so far.
    pub fn continues(&self) -> Continues {
        self.continues
    }

    /// Returns whether the list was all the ids so far.
    fn take_ids(&mut self, sent: Sent<'_>, count: usize) -> Result<bool, serde_json::Error> {
        match sent {
            Sent::Added(raw) => {
                // The list repeats the ids so far byte for byte: these are the ones after them.
                self.parse_ids(raw, count.saturating_sub(self.ids.len()))?;
                let whole = self.is_whole_list(self.ids.len() + self.parsed.len(), count, || true);
                if !whole {
                    // The counts say delta: the repeated ids are new ones too.
                    self.ids.extend_from_within(..);
                }
                self.ids.extend_from_slice(&self.parsed);
                Ok(whole)
            }
            Sent::Whole(raw) => {
                self.parse_ids(raw, count)?;
                let parsed = &self.parsed;
                let whole =
                    self.is_whole_list(parsed.len(), count, || parsed.starts_with(&self.ids));
                if whole {
                    std::mem::swap(&mut self.ids, &mut self.parsed);
                } else {
                    self.ids.extend_from_slice(&self.parsed);
                }
                Ok(whole)
            }
        }
    }

    /// Parses an id list into `parsed`, with room for the `expected` ids made at once (capped
    /// by how many the list's bytes can hold) instead of growing from nothing as it is read.
    fn parse_ids(&mut self, raw: &RawValue, expected: usize) -> Result<(), serde_json::Error> {
        self.parsed.clear();
        // Each id takes two bytes at least ("1,"): a bound a worker's count cannot exceed.
        self.parsed.reserve(expected.min(raw.get().len() / 2));
        let mut de = serde_json::Deserializer::from_str(raw.get());
        // In place: serde's own `Vec` reading, into the room made above.
        Vec::deserialize_in_place(&mut de, &mut self.parsed)?;
        de.end()
    }

    /// Whether a list of `n` ids is all the ids so far (cumulative) rather than the new ones;
    /// `repeats` says whether it starts with the ids so far, asked only when the counts cannot
    /// tell.
    fn is_whole_list(&self, n: usize, count: usize, repeats: impl FnOnce() -> bool) -> bool {
        let so_far = self.ids.len();
        if so_far == 0 {
            // First ids: both readings agree.
            return true;
        }
        if n < so_far {
            // Fewer ids than received: not a whole list.
            return false;
        }
        if n == count {
            return true;
        }
        if so_far + n == count {
            return false;
        }
        repeats()
    }

    fn take_text(&mut self, sent: Sent<'_>) -> Result<String, serde_json::Error> {
        let (raw, added) = match sent {
            Sent::Whole(raw) => (raw, false),
            Sent::Added(raw) => (raw, true),
        };
        let text: String = serde_json::from_str(raw.get())?;
        if added && !self.text_is_delta {
            // Extends all the text so far: cumulative, and this is the new text.
            self.text.push_str(&text);
            self.continues.text = true;
            return Ok(text);
        }
        let new = self.new_text(&text);
        self.continues.text = !self.text_is_delta && !text.is_empty();
        Ok(new)
    }

    fn new_text(&mut self, text: &str) -> String {
        if text.is_empty() {
            return String::new();
        }
        if self.text_is_delta {
            return text.to_owned();
        }
        if let Some(new) = text.strip_prefix(self.text.as_str()) {
            self.text.push_str(new);
            return new.to_owned();
        }
        // Not an extension of what came before: deltas, from here to the end.
        self.text_is_delta = true;
        self.text = String::new();
        text.to_owned()
    }

    /// Every output id so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: impl serde::Serialize) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).expect("JSON")
    }

    /// Feeds `(text, ids, completion_tokens)` chunks; returns the joined new text and the ids.
    fn read(chunks: &[(Option<&str>, &[u32], u32)]) -> (String, Vec<u32>) {
        let mut r = Received::default();
        let mut out = String::new();
        for (text, ids, count) in chunks {
            let before = r.ids().len();
            let text = text.map(raw);
            let (new, added) = r
                .take(
                    text.as_deref().map(Sent::Whole),
                    Some(Sent::Whole(&raw(ids))),
                    *count,
                )
                .expect("valid chunk");
            assert_eq!(r.ids().len(), before + added);
            out.push_str(&new.unwrap_or_default());
        }
        (out, r.ids().to_vec())
    }

    #[test]
    fn cumulative_values_with_escapes_and_python_spacing() {
        // As Python's `json.dumps` sends them: `", "` between ids, non-ASCII as escapes.
        let chunks = [
            (r#""a\\""#, "[1, 2]", 2),
            (r#""a\\n \u00e9""#, "[1, 2, 3]", 3),
            (r#""a\\n \u00e9\ud83d\ude00\"""#, "[1, 2, 3, 40, 5]", 5),
        ];
        let mut r = Received::default();
        let mut out = String::new();
        for (text, ids, count) in chunks {
            let text: &RawValue = serde_json::from_str(text).expect("text");
            let ids: &RawValue = serde_json::from_str(ids).expect("ids");
            let (new, _) = r
                .take(Some(Sent::Whole(text)), Some(Sent::Whole(ids)), count)
                .expect("chunk");
            out.push_str(&new.unwrap_or_default());
        }
        assert_eq!(out, "a\\n \u{e9}\u{1f600}\"");
        assert_eq!(r.ids(), &[1, 2, 3, 40, 5]);
    }

    #[test]
    fn a_delta_list_that_repeats_the_ids_so_far_is_still_a_delta() {
        // Delta ids [7] then [7, 8]: the counts (1, then 3) say delta, though the bytes of the
        // second list continue the first's.
        let got = read(&[(None, &[7], 1), (None, &[7, 8], 3)]);
        assert_eq!(got.1, vec![7, 7, 8]);
    }

    #[test]
    fn a_chunk_that_is_not_json_of_its_kind_is_an_error() {
        let mut r = Received::default();
        let ids: &RawValue = serde_json::from_str("[1,2]").expect("ids");
        r.take(None, Some(Sent::Whole(ids)), 2).expect("chunk");
        let bad: &RawValue = serde_json::from_str(r#"[1,2,"x"]"#).expect("JSON");
        assert!(r.take(None, Some(Sent::Whole(bad)), 3).is_err());
        let bad: &RawValue = serde_json::from_str("[1,2,-3]").expect("JSON");
        assert!(r.take(None, Some(Sent::Whole(bad)), 3).is_err());
    }

    #[test]
    fn cumulative_text_and_cumulative_ids() {
        let got = read(&[
            (Some("Hel"), &[1], 1),
            (Some("Hel"), &[1, 2], 2), // held back: text unchanged while ids grow
            (Some("Hello"), &[1, 2, 3], 3),
            (Some("Hello world"), &[1, 2, 3, 4, 5], 5), // two steps collapsed into one chunk
        ]);
        assert_eq!(got, ("Hello world".into(), vec![1, 2, 3, 4, 5]));
    }

    #[test]
    fn delta_text_and_delta_ids() {
        let got = read(&[
            (Some("Hel"), &[1], 1),
            (Some(""), &[2], 2),
            (Some("lo"), &[3], 3),
            (Some(" world"), &[4, 5], 5),
        ]);
        assert_eq!(got, ("Hello world".into(), vec![1, 2, 3, 4, 5]));
    }

    #[test]
    fn cumulative_text_with_delta_ids_as_sglang_0_5_9_stream_output() {
        let got = read(&[
            (Some("Hel"), &[1], 1),
            (Some("Hello"), &[2], 2),
            (Some("Hello"), &[3], 3),
            (Some("Hello world"), &[4, 5], 5),
        ]);
        assert_eq!(got, ("Hello world".into(), vec![1, 2, 3, 4, 5]));
    }

    #[test]
    fn an_id_count_that_matches_the_running_count_does_not_make_delta_text_cumulative() {
        // The first chunk carries no ids (a build that leaves them out until the first
        // decode step); the second chunk's delta ids then number `completion_tokens`, which
        // the old rule read as "cumulative" for the text too and cut "Hel" off " world".
        let got = read(&[(Some("Hel"), &[], 1), (Some("lo world"), &[1, 2], 2)]);
        assert_eq!(got, ("Hello world".into(), vec![1, 2]));
        // And delta ids whose count equals `completion_tokens` once ids were received cannot
        // happen; a whole list that repeats the ids so far is cumulative when counts are absent.
        let got = read(&[(None, &[7], 0), (None, &[7, 8], 0), (None, &[9], 0)]);
        assert_eq!(got.1, vec![7, 8, 9]);
    }

    #[test]
    fn a_delta_that_leaves_the_text_so_far_fixes_delta_reading_for_good() {
        // "ab" then "c" proves deltas; "abc…" later is a delta too, not a repeat of the text.
        let got = read(&[
            (Some("ab"), &[1], 1),
            (Some("c"), &[2], 2),
            (Some("abcd"), &[3], 3),
        ]);
        assert_eq!(got.0, "abcabcd");
    }

    #[test]
    fn empty_text_is_no_evidence() {
        // Cumulative text with an empty chunk in between stays cumulative.
        let got = read(&[
            (Some("Hi"), &[1], 1),
            (Some(""), &[1, 2], 2),
            (Some("Hi there"), &[1, 2, 3], 3),
        ]);
        assert_eq!(got.0, "Hi there");
    }

    #[test]
    fn no_text_field_leaves_the_text_to_the_caller() {
        let mut r = Received::default();
        assert_eq!(
            r.take(None, Some(Sent::Whole(&raw([5, 6]))), 2).ok(),
            Some((None, 2))
        );
        assert_eq!(
            r.take(None, Some(Sent::Whole(&raw([5, 6, 7]))), 3).ok(),
            Some((None, 1))
        );
        assert_eq!(r.ids(), &[5, 6, 7]);
    }
}
