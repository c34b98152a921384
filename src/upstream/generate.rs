//! SGLang's native `/generate` with our token ids, read back as a stream of text deltas.
//! Handles cumulative (default) and incremental output (see `received`; an event that repeats
//! the last one is cut down to what it adds first, `splice`), and workers that send only
//! `output_ids` (`--skip-tokenizer-init`), which we detokenize here. A stream whose client left
//! is read out and its leftover tokens counted (`leftover`).

mod leftover;
mod reader;
mod received;
mod splice;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;

use super::{Body, Client, Origin, UpstreamError};
use crate::protocol::openai::logprobs::TokenLogprob;
use crate::protocol::sglang::{FinishReason, GenerateRequest, LogprobEntry, MetaInfo};
use crate::stream::sse::SseParser;
use crate::tokenize::{IncrementalDecoder, Tokenizer};
pub use reader::{Chunk, ChunkReader};

/// Largest single SSE event we accept from a worker (cumulative text of a long answer).
const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// What one upstream chunk added.
#[derive(Debug, Default)]
pub struct Delta {
    pub text: String,
    pub new_tokens: u32,
    pub finish: Option<FinishReason>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
    /// The new tokens' logprobs, when the request asked for them.
    pub logprobs: Vec<TokenLogprob>,
}

pub struct GenerateStream {
    /// `None` once handed to [`GenerateStream::count_leftover`].
    body: Option<Body>,
    parser: SseParser,
    worker: Arc<Origin>,
    /// Text and output ids so far (the ids so a generation can continue elsewhere).
    chunks: ChunkReader,
    completion_tokens: u32,
    detok: Option<IncrementalDecoder>,
    /// The text is ours: decoded from the ids with `detok` even when the worker sends text (a
    /// continued generation, whose worker cannot know what the earlier leg held back).
    own_text: bool,
    tokenizer: Arc<Tokenizer>,
    stop: Vec<String>,
    stop_matched: Option<String>,
    stopped_here: bool,
    finished: bool,
    /// The prompt's cached count from elsewhere (a PD pair's prefill worker), reported instead
    /// of this worker's.
    cached_tokens: Option<u32>,
    /// Logprob entries taken so far (SGLang's cumulative modes repeat them in every chunk).
    logprobs_taken: usize,
    /// The request asked for no stream: the body is one JSON answer, not SSE events.
    whole: bool,
}

pub async fn start(
    client: &Client,
    worker: &Arc<Origin>,
    tokenizer: Arc<Tokenizer>,
    request: &GenerateRequest<'_>,
    decoder: Option<IncrementalDecoder>,
) -> Result<GenerateStream, UpstreamError> {
    let body = request_body(worker, request)?;
    // No limit: as much room as the reader gives any answer.
    let max_tokens = request
        .sampling_params
        .max_new_tokens
        .map_or(usize::MAX, |n| n as usize);
    let resp = client.post_json(worker, "/generate", body).await?;
    Ok(GenerateStream {
        body: Some(resp.into_body()),
        parser: SseParser::new(MAX_EVENT_BYTES),
        worker: Arc::clone(worker),
        chunks: ChunkReader::with_room(max_tokens),
        completion_tokens: 0,
        own_text: decoder.is_some(),
        detok: decoder,
        tokenizer,
        stop: request.sampling_params.stop.clone(),
        stop_matched: None,
        stopped_here: false,
        finished: false,
        cached_tokens: None,
        logprobs_taken: 0,
        whole: !request.stream,
    })
}

/// The `/generate` body (a PD pair's prefill worker gets the same).
pub fn request_body(
    worker: &Origin,
    request: &GenerateRequest<'_>,
) -> Result<Bytes, UpstreamError> {
    request
        .to_json()
        .map(Bytes::from)
        .map_err(|e| UpstreamError::Protocol {
            url: worker.url.clone(),
            reason: e.to_string(),
        })
}

impl GenerateStream {
    /// The next chunk that carries anything. `None` after the finishing chunk and `[DONE]`.
    pub async fn next(&mut self) -> Result<Option<Delta>, UpstreamError> {
        if self.whole {
            // Boxed: reading the whole body is one call, and inline it would grow the future
            // a stream builds for every event.
            return Box::pin(self.whole_answer()).await;
        }
        loop {
            match self.parser.next_event() {
                Ok(Some(ev)) if ev.is_done() => {
                    return if self.finished {
                        Ok(None)
                    } else {
                        Err(self.broken("stream ended without a finish reason"))
                    };
                }
                Ok(Some(ev)) => {
                    // Nothing but the delta is held across the drain, and the drain is boxed:
                    // the size of this future is copied on every token, the drain happens once.
                    let decoded = self.decode(&ev.data);
                    drop(ev);
                    let Some(delta) = decoded? else { continue };
                    if self.finished && !self.stopped_here {
                        Box::pin(self.drain()).await;
                    }
                    return Ok(Some(delta));
                }
                Ok(None) => {}
                Err(e) => return Err(self.protocol(e.to_string())),
            }
            let Some(body) = self.body.as_mut() else {
                return Err(self.broken("stream already handed over"));
            };
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.push(&data);
                    }
                }
                Some(Err(e)) => return Err(self.broken(&e.to_string())),
                None => {
                    if let Some(ev) = self.parser.finish().filter(|ev| !ev.is_done()) {
                        if let Some(delta) = self.decode(&ev.data)? {
                            return Ok(Some(delta));
                        }
                    }
                    return if self.finished {
                        Ok(None)
                    } else {
                        Err(self.broken("connection closed before the generation finished"))
                    };
                }
            }
        }
    }

    /// A response to a request without `stream`: one object shaped as a stream's last chunk
    /// (cumulative text and ids, the finish reason), read to its end, under the same bound
    /// as one event.
    async fn whole_answer(&mut self) -> Result<Option<Delta>, UpstreamError> {
        let Some(body) = self.body.take() else {
            return Ok(None);
        };
        let bytes = http_body_util::Limited::new(body, MAX_EVENT_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    self.protocol(format!("the answer is over {MAX_EVENT_BYTES} bytes"))
                } else {
                    self.broken(&e.to_string())
                }
            })?
            .to_bytes();
        match self.decode(&bytes)? {
            Some(delta) if self.finished => Ok(Some(delta)),
            _ => Err(self.protocol("the answer has no finish reason".into())),
        }
    }

    /// Reads the rest of a finished response (`[DONE]` and the end of the body): hyper returns
    /// a connection to its pool only once the body was read to its end, and without that every
    /// request would open a new TCP connection to the worker.
    async fn drain(&mut self) {
        let Some(body) = self.body.as_mut() else {
            return;
        };
        let rest = async { while let Some(Ok(_)) = body.frame().await {} };
        // The worker ends the body right after `[DONE]`; don't wait on one that doesn't.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), rest).await;
    }

    fn decode(&mut self, data: &[u8]) -> Result<Option<Delta>, UpstreamError> {
        if self.finished {
            return Ok(None);
        }
        let Chunk {
            text,
            added,
            mut meta,
        } = self
            .chunks
            .read(data)
            .map_err(|_| super::first_event::refusal(data))?;
        let logprobs = self.new_logprobs(&mut meta);
        let text = match text {
            Some(t) if !self.own_text => t,
            _ => {
                let all = self.chunks.ids();
                let new_ids = all.get(all.len() - added..).unwrap_or(&[]).to_vec();
                self.detokenize(&new_ids)?
            }
        };
        let new_tokens = meta
            .completion_tokens
            .saturating_sub(self.completion_tokens);
        self.completion_tokens = self.completion_tokens.max(meta.completion_tokens);
        if let Some(FinishReason::Abort {
            message,
            status_code,
            ..
        }) = &meta.finish_reason
        {
            self.finished = true;
            return Err(UpstreamError::Aborted {
                message: message.clone().unwrap_or_else(|| "aborted".into()),
                status: *status_code,
            });
        }
        let mut finish = meta.finish_reason;
        let mut text = text;
        if let Some(matched) = self.stop_matched.take() {
            // Our own detokenizer hit a stop string: the generation is over for the client.
            self.stopped_here = finish.is_none();
            finish = Some(FinishReason::Stop {
                matched: Some(matched.into()),
            });
        } else if finish.is_some() {
            if let Some(d) = self.detok.as_mut() {
                let rest = d.finish().map_err(|e| UpstreamError::Protocol {
                    url: self.worker.url.clone(),
                    reason: e.to_string(),
                })?;
                text.push_str(rest.text);
            }
        }
        if finish.is_some() {
            self.finished = true;
        }
        if text.is_empty() && new_tokens == 0 && finish.is_none() {
            return Ok(None);
        }
        Ok(Some(Delta {
            text,
            new_tokens,
            finish,
            prompt_tokens: meta.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens.unwrap_or(meta.cached_tokens),
            logprobs,
        }))
    }

    /// The chunk's logprob entries not taken before: a list as long as every output id so far
    /// is cumulative (the first list is both), anything else holds only new tokens.
    fn new_logprobs(&mut self, meta: &mut MetaInfo) -> Vec<TokenLogprob> {
        let Some(entries) = meta.output_token_logprobs.take() else {
            return Vec::new();
        };
        let tops = meta.output_top_logprobs.take().unwrap_or_default();
        let skip = if entries.len() == self.chunks.ids().len() {
            self.logprobs_taken.min(entries.len())
        } else {
            0
        };
        let text = |id: u32| self.tokenizer.decode(&[id], false).unwrap_or_default();
        let new: Vec<TokenLogprob> = entries
            .iter()
            .enumerate()
            .skip(skip)
            .map(|(i, LogprobEntry(logprob, id, _))| TokenLogprob {
                token: text(*id),
                logprob: logprob.unwrap_or(f64::NEG_INFINITY),
                top: tops
                    .get(i)
                    .and_then(Option::as_ref)
                    .map(|top| {
                        top.iter()
                            .map(|LogprobEntry(l, id, _)| {
                                (text(*id), l.unwrap_or(f64::NEG_INFINITY))
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect();
        self.logprobs_taken = skip + new.len();
        new
    }

    /// Workers started with `--skip-tokenizer-init` send ids only; stop strings are then ours to apply.
    fn detokenize(&mut self, ids: &[u32]) -> Result<String, UpstreamError> {
        let (tokenizer, stop) = (&self.tokenizer, &self.stop);
        let d = self
            .detok
            .get_or_insert_with(|| tokenizer.incremental_decoder(true, stop.clone()));
        let delta = d.push(ids).map_err(|e| UpstreamError::Protocol {
            url: self.worker.url.clone(),
            reason: e.to_string(),
        })?;
        if let Some(m) = delta.matched_stop {
            self.stop_matched = Some(m.to_owned());
        }
        Ok(delta.text.to_owned())
    }

    /// Reports `cached` as the prompt's cached tokens from now on (a PD pair's prefill count).
    pub fn set_cached_tokens(&mut self, cached: u32) {
        self.cached_tokens = Some(cached);
    }

    /// Our decoder, in the state it reached (`None` if the worker's text was used).
    pub fn take_decoder(&mut self) -> Option<IncrementalDecoder> {
        self.detok.take()
    }

    /// The output ids received so far.
    pub fn output_ids(&self) -> &[u32] {
        self.chunks.ids()
    }

    /// We ended the answer at a stop string while the worker may still be generating.
    pub fn stopped_here(&self) -> bool {
        self.stopped_here
    }

    fn broken(&self, reason: &str) -> UpstreamError {
        UpstreamError::Disconnected {
            url: self.worker.url.clone(),
            reason: reason.to_owned(),
        }
    }

    fn protocol(&self, reason: String) -> UpstreamError {
        UpstreamError::Protocol {
            url: self.worker.url.clone(),
            reason,
        }
    }
}
