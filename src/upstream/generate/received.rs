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

/// The text and ids received so far on one stream.
#[derive(Debug, Default)]
pub struct Received {
    /// All text so far, kept only while the text may be cumulative (for the prefix check).
    text: String,
    /// A chunk proved the text to be deltas.
    text_is_delta: bool,
    /// Every output id so far.
    ids: Vec<u32>,
}

impl Received {
    /// Takes in one chunk; returns its new text (`None` when the chunk has no `text` field)
    /// and how many of [`Received::ids`]' last ids it added.
    pub fn take(
        &mut self,
        text: Option<&str>,
        ids: Vec<u32>,
        completion_tokens: u32,
    ) -> (Option<String>, usize) {
        let before = self.ids.len();
        if self.ids_are_cumulative(&ids, completion_tokens) {
            self.ids = ids;
        } else {
            self.ids.extend_from_slice(&ids);
        }
        let added = self.ids.len().saturating_sub(before);
        (text.map(|t| self.new_text(t)), added)
    }

    fn ids_are_cumulative(&self, ids: &[u32], completion_tokens: u32) -> bool {
        let (so_far, n, count) = (self.ids.len(), ids.len(), completion_tokens as usize);
        if so_far == 0 || n < so_far {
            // First ids: both readings agree. Fewer ids than received: not a whole list.
            return false;
        }
        if n == count {
            return true;
        }
        if so_far + n == count {
            return false;
        }
        ids.starts_with(&self.ids)
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

    /// Every output id received so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `(text, ids, completion_tokens)` chunks; returns the joined new text and the ids.
    fn read(chunks: &[(Option<&str>, &[u32], u32)]) -> (String, Vec<u32>) {
        let mut r = Received::default();
        let mut out = String::new();
        for (text, ids, count) in chunks {
            let before = r.ids().len();
            let (new, added) = r.take(*text, ids.to_vec(), *count);
            assert_eq!(r.ids().len(), before + added);
            out.push_str(&new.unwrap_or_default());
        }
        (out, r.ids().to_vec())
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
        assert_eq!(r.take(None, vec![5, 6], 2), (None, 2));
        assert_eq!(r.take(None, vec![5, 6, 7], 3), (None, 1));
        assert_eq!(r.ids(), &[5, 6, 7]);
    }
}
