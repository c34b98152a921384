//! A generation continued on another worker when its worker dies mid-stream
//! (`--migration-limit`): the prompt plus every token already relayed, with the remaining
//! budget, and one decoder whose state spans the legs.

use std::sync::Arc;

use super::Generation;
use crate::error::GatewayError;
use crate::relay::leg::{open_leg, Leg};
use crate::tokenize::IncrementalDecoder;
use crate::upstream::UpstreamError;

impl Generation {
    pub(super) fn can_migrate(&self, e: &UpstreamError) -> bool {
        e.is_disconnect() && self.migrations < self.exchange.relay().reliability.migration_limit
    }

    /// Continues on another worker from where the dead one stopped: the prompt plus every
    /// token already relayed, with the remaining budget.
    pub(super) async fn migrate(&mut self, cause: &UpstreamError) -> Result<(), UpstreamError> {
        self.migrations += 1;
        let relay = Arc::clone(self.exchange.relay());
        self.exchange.leg_failed(cause);
        let budget = self.spec.params.max_new_tokens.unwrap_or(u32::MAX);
        let done_tokens = self.exchange.usage.completion_tokens as u32;
        if done_tokens >= budget {
            relay
                .metrics
                .migrations
                .with_label_values(&["failed"])
                .inc();
            return Err(UpstreamError::Protocol {
                url: self.exchange.url().to_owned(),
                reason: "worker died after the last token".into(),
            });
        }
        let mut params = self.spec.params.clone();
        params.max_new_tokens = Some(budget - done_tokens);
        params.min_new_tokens = params.min_new_tokens.map(|m| m.saturating_sub(done_tokens));
        let mut relayed = std::mem::take(&mut self.earlier_ids);
        relayed.extend_from_slice(self.upstream.output_ids());
        let input: Vec<u32> = self.spec.prompt.iter().chain(&relayed).copied().collect();
        let (decoder, catch_up) = self.carried_decoder(&relayed);
        let catch_up = catch_up.unwrap_or_default();
        let rid = format!("{}-m{}", self.spec.rid, self.migrations);
        tracing::warn!(rid = %self.spec.rid, from = %self.exchange.url(), tokens = done_tokens, error = %cause, "worker failed mid-stream; continuing elsewhere");
        let session = self.spec.session_key.as_deref();
        let leg = Leg {
            input_ids: &input,
            params: &params,
            session_key: session,
            rid: &rid,
            logprobs: self.spec.logprobs,
            // The continuation goes wherever the policy says (the dead worker is excluded).
            prefer: None,
            // Only a stream is continued: an answer sent at once had nothing relayed before.
            at_once: None,
        };
        match open_leg(&mut self.exchange, leg, decoder.as_ref(), &mut self.tried).await {
            Ok((upstream, mut first)) => {
                first.text.insert_str(0, &catch_up);
                // The old stream drops here; the old leg went when the new one was set.
                self.upstream = upstream;
                self.earlier_ids = relayed;
                self.tokens_before_leg = done_tokens;
                self.continued = true;
                self.pending = Some(first);
                relay
                    .metrics
                    .migrations
                    .with_label_values(&["continued"])
                    .inc();
                Ok(())
            }
            Err(e) => {
                relay
                    .metrics
                    .migrations
                    .with_label_values(&["failed"])
                    .inc();
                Err(match e {
                    GatewayError::Upstream(u) => u,
                    other => UpstreamError::Disconnected {
                        url: self.exchange.url().to_owned(),
                        reason: format!("{cause}; no worker could continue: {other}"),
                    },
                })
            }
        }
    }

    /// The decoder a continued leg's text comes from, and the text that is due at once.
    ///
    /// A continuing worker decodes only its own output, so it cannot know what the dead
    /// worker's decoder held back (half a UTF-8 character, the start of a stop string, a
    /// Metaspace leading space): the text of every continued leg is ours, decoded from the ids
    /// with one decoder whose state spans the legs, so the client gets what one unbroken
    /// generation of the same ids would give. The dead leg's own decoder is carried over when
    /// it had one; otherwise a fresh one reads the ids relayed so far, and what it releases
    /// beyond the text already sent (the worker's held-back part, now known to be safe) is due.
    /// `None` (the worker's text is used as before) only if the ids cannot be decoded.
    fn carried_decoder(&mut self, relayed: &[u32]) -> (Option<IncrementalDecoder>, Option<String>) {
        if let Some(d) = self.upstream.take_decoder() {
            return (Some(d), None);
        }
        let relay = Arc::clone(self.exchange.relay());
        let mut d = relay
            .tokenizer
            .incremental_decoder(true, self.spec.params.stop.clone());
        // One id at a time, as a stream would: a push whose window ends inside a character
        // holds back the whole push, so one push of everything could release nothing.
        let mut released = String::new();
        for id in relayed {
            match d.push(std::slice::from_ref(id)) {
                Ok(delta) => released.push_str(delta.text),
                Err(e) => {
                    tracing::warn!(rid = %self.spec.rid, error = %e, "cannot decode the relayed ids; the continuation's own text is used");
                    return (None, None);
                }
            }
        }
        // Our decoder may have released more than the worker sent (that part is due now), or
        // less (the rest of what was sent is cut from what it releases next). A worker whose
        // text is not this tokenizer's matches neither: nothing is repeated or guessed.
        if let Some(due) = released.strip_prefix(self.sent.as_str()) {
            return (Some(d), Some(due.to_owned()));
        }
        if let Some(ahead) = self.sent.strip_prefix(released.as_str()) {
            self.overlap = ahead.to_owned();
        }
        (Some(d), None)
    }
}

/// Cuts from `text` what of `overlap` it repeats; `overlap` keeps what is still to come.
pub(super) fn cut_overlap(text: &mut String, overlap: &mut String) {
    if let Some(rest) = text.strip_prefix(overlap.as_str()) {
        *text = rest.to_owned();
        overlap.clear();
    } else if let Some(rest) = overlap.strip_prefix(text.as_str()) {
        *overlap = rest.to_owned();
        text.clear();
    } else {
        overlap.clear();
    }
}
