//! Streaming detokenization with stop strings.
//!
//! Prefix-offset method (as in TGI/vLLM/SGLang and `tokenizers`' own
//! `DecodeStream`): keep a short window of ids, decode it, and emit what goes
//! past the decoded text of the window's already-emitted head. Decoding the
//! window instead of single tokens keeps what per-token decoding loses
//! (Metaspace leading spaces, byte-level characters split over tokens).
//!
//! Not `tokenizers::DecodeStream` itself: it borrows the tokenizer, so it
//! cannot live in a task next to the `Arc` it borrows from, it takes one id
//! per step, and it allocates a new id vector per step. Its free function
//! `step_decode_stream` is documented as internal. Here the window is drained
//! in place and the text buffers are reused.

#[cfg(test)]
mod tests;

use crate::tokenize::{TokenizeError, Tokenizer};

/// What one `push`/`finish` produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeDelta<'a> {
    /// New text to send (possibly empty: held back).
    pub text: &'a str,
    /// The stop string that ended the stream, if one did.
    pub matched_stop: Option<&'a str>,
    /// No more text will come: a stop string matched or `finish` was called.
    pub finished: bool,
}

/// Turns output token ids, a step at a time, into text deltas. Cloned to carry its state
/// (held-back text, window) from one worker's leg of a generation to the next.
#[derive(Debug, Clone)]
pub struct IncrementalDecoder {
    tokenizer: Tokenizer,
    skip_special_tokens: bool,
    stops: Vec<String>,
    /// Window of ids: `ids[..prefix_index]` were already emitted (context).
    ids: Vec<u32>,
    /// `decode(ids[..prefix_index])`.
    prefix: String,
    prefix_index: usize,
    /// Decoded text held back because it may begin a stop string.
    pending: String,
    /// The text returned by the last call (reused buffer).
    out: String,
    matched: Option<usize>,
    finished: bool,
}

impl IncrementalDecoder {
    /// `stops`: strings that end the output (not included in it). Empty
    /// strings are ignored.
    pub fn new(tokenizer: Tokenizer, skip_special_tokens: bool, stops: Vec<String>) -> Self {
        let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
        IncrementalDecoder {
            tokenizer,
            skip_special_tokens,
            stops,
            ids: Vec::with_capacity(16),
            prefix: String::new(),
            prefix_index: 0,
            pending: String::new(),
            out: String::new(),
            matched: None,
            finished: false,
        }
    }

    /// True once a stop string matched or `finish` ran.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Feed the ids of one step (one or more); get the text that is now
    /// safe to send. After a stop string matched, further ids are ignored.
    pub fn push(&mut self, ids: &[u32]) -> Result<DecodeDelta<'_>, TokenizeError> {
        self.out.clear();
        if self.finished || ids.is_empty() {
            return Ok(self.delta());
        }
        let before = self.ids.len();
        if self.skip_special_tokens {
            // decode() drops them anyway; keeping them out of the window stops
            // it from growing while a model emits only special tokens.
            let tok = &self.tokenizer;
            self.ids
                .extend(ids.iter().filter(|id| !tok.is_special(**id)));
        } else {
            self.ids.extend_from_slice(ids);
        }
        if self.ids.len() == before {
            return Ok(self.delta());
        }
        let text = self.decode_window()?;
        // Hold back while the window ends in an incomplete character: the
        // decoder renders missing bytes as U+FFFD.
        if text.len() > self.prefix.len() && !text.ends_with('\u{FFFD}') {
            let Some(new) = text
                .get(self.prefix.len()..)
                .filter(|_| text.starts_with(&self.prefix))
            else {
                return Err(TokenizeError::Decode(
                    "incremental decode: window no longer starts with its prefix".into(),
                ));
            };
            self.pending.push_str(new);
            // Slide: the ids just emitted become the context for the next step.
            self.ids.drain(..self.prefix_index);
            self.prefix = self.decode_window()?;
            self.prefix_index = self.ids.len();
            self.release(false);
        }
        Ok(self.delta())
    }

    /// End of stream: flush held-back text (including an incomplete trailing
    /// character, as `decode` would render it), unless a stop already matched.
    pub fn finish(&mut self) -> Result<DecodeDelta<'_>, TokenizeError> {
        self.out.clear();
        if self.finished {
            return Ok(self.delta());
        }
        if self.ids.len() > self.prefix_index {
            let text = self.decode_window()?;
            if let Some(new) = text
                .get(self.prefix.len()..)
                .filter(|_| text.starts_with(&self.prefix))
            {
                self.pending.push_str(new);
            }
            self.ids.clear();
            self.prefix.clear();
            self.prefix_index = 0;
        }
        self.release(true);
        self.finished = true;
        Ok(self.delta())
    }

    fn decode_window(&self) -> Result<String, TokenizeError> {
        self.tokenizer.decode(&self.ids, self.skip_special_tokens)
    }

    fn delta(&self) -> DecodeDelta<'_> {
        DecodeDelta {
            text: &self.out,
            matched_stop: self.matched.map(|i| self.stops[i].as_str()),
            finished: self.finished,
        }
    }

    /// Move from `pending` to `out` whatever cannot be part of a stop string.
    fn release(&mut self, all: bool) {
        if self.stops.is_empty() {
            self.out.push_str(&self.pending);
            self.pending.clear();
            return;
        }
        // A full match can only lie in `pending`: every earlier tail that
        // could start a stop string was held back.
        if let Some((at, idx)) = self.earliest_stop() {
            self.out.push_str(&self.pending[..at]);
            self.pending.clear();
            self.matched = Some(idx);
            self.finished = true;
            return;
        }
        let keep = if all { 0 } else { self.stop_prefix_tail() };
        let cut = self.pending.len() - keep;
        self.out.push_str(&self.pending[..cut]);
        self.pending.drain(..cut);
    }

    /// Earliest occurrence of any stop string; ties go to the first listed.
    fn earliest_stop(&self) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for (i, s) in self.stops.iter().enumerate() {
            let found = self.pending.find(s.as_str());
            if let Some(at) = found.filter(|at| best.is_none_or(|(b, _)| *at < b)) {
                best = Some((at, i));
            }
        }
        best
    }

    /// Length of the longest tail of `pending` that is a proper prefix of a
    /// stop string.
    fn stop_prefix_tail(&self) -> usize {
        let p = self.pending.as_str();
        let mut keep = 0;
        for s in &self.stops {
            let max = (s.len() - 1).min(p.len());
            // Longest first; only char boundaries of both strings qualify.
            for k in (keep + 1..=max).rev() {
                if p.is_char_boundary(p.len() - k)
                    && s.is_char_boundary(k)
                    && p.as_bytes()[p.len() - k..] == s.as_bytes()[..k]
                {
                    keep = k;
                    break;
                }
            }
        }
        keep
    }
}
