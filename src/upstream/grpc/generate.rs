//! `Generate` with our token ids, read back as text deltas. As `smg-grpc-servicer` sends it: a
//! `chunk` per engine output whose `token_ids` are the new ids only (its counts cumulative),
//! and after the last chunk a `complete` with the finish reason, whose `output_ids` repeat that
//! last chunk's. The worker sends ids only, so the text is ours: one incremental decoder, which
//! also applies the stop strings (the worker matches them too; whichever sees one first ends
//! the answer). A request without `stream` gets only the `complete`, holding every id.

use std::sync::Arc;
use std::time::Duration;

use super::{status_error, Channels, Phase};
use crate::protocol::grpc::{self as wire, pb};
use crate::protocol::openai::logprobs::TokenLogprob;
use crate::protocol::sglang::{FinishReason, GenerateRequest};
use crate::tokenize::{IncrementalDecoder, Tokenizer};
use crate::upstream::generate::Delta;
use crate::upstream::{Origin, UpstreamError, LEFTOVER_WAIT};

/// How long we wait for the stream's end (its trailers) after `complete`.
const END_WAIT: Duration = Duration::from_millis(500);

pub struct GrpcStream {
    /// `None` once handed to [`GrpcStream::count_leftover`].
    stream: Option<tonic::Streaming<pb::GenerateResponse>>,
    worker: Arc<Origin>,
    /// Output ids of this leg (a continued generation elsewhere starts from them).
    ids: Vec<u32>,
    completion_tokens: u32,
    detok: IncrementalDecoder,
    stopped_here: bool,
    finished: bool,
    /// The prompt's cached count when another worker reported it (overrides the worker's).
    cached_tokens: Option<u32>,
    /// Decodes the logprob entries' tokens, one id at a time.
    tokenizer: Arc<Tokenizer>,
}

/// Opens the call for `sent` (pinned to its rank unit's rank, if any); `Generate` answers
/// nothing until the first tokens (or its refusal).
pub async fn start(
    channels: &Channels,
    worker: &Arc<Origin>,
    tokenizer: &Arc<Tokenizer>,
    sent: &GenerateRequest<'_>,
    decoder: Option<IncrementalDecoder>,
) -> Result<GrpcStream, UpstreamError> {
    let mut client = channels.client(worker)?;
    let params = sent.sampling_params;
    let request = pb::GenerateRequest {
        request_id: sent.rid.to_owned(),
        tokenized: Some(pb::TokenizedInput {
            original_text: String::new(),
            input_ids: sent.input_ids.to_vec(),
        }),
        sampling_params: Some(wire::to_proto(params)),
        // Not streamed: one `complete` with every output id (`--whole-answers at-once`).
        stream: sent.stream,
        return_logprob: sent.return_logprob,
        top_logprobs_num: i32::try_from(sent.top_logprobs_num).unwrap_or(i32::MAX),
        // Output logprobs only: -1 is the last prompt token, as `/generate` defaults it.
        logprob_start_len: -1,
        // A data-parallel worker's rank unit pins the request to its rank.
        data_parallel_rank: sent.ranks.own.and_then(|r| i32::try_from(r.rank).ok()),
        ..Default::default()
    };
    let stream = client
        .generate(request)
        .await
        .map_err(|s| status_error(worker, s, Phase::Call))?
        .into_inner();
    Ok(GrpcStream {
        stream: Some(stream),
        worker: Arc::clone(worker),
        ids: Vec::new(),
        completion_tokens: 0,
        detok: decoder.unwrap_or_else(|| tokenizer.incremental_decoder(true, params.stop.clone())),
        stopped_here: false,
        finished: false,
        cached_tokens: None,
        tokenizer: Arc::clone(tokenizer),
    })
}

impl GrpcStream {
    pub fn set_cached_tokens(&mut self, cached: u32) {
        self.cached_tokens = Some(cached);
    }

    /// The next message that carries anything. `None` after the finishing one.
    pub async fn next(&mut self) -> Result<Option<Delta>, UpstreamError> {
        loop {
            if self.finished {
                return Ok(None);
            }
            let Some(stream) = self.stream.as_mut() else {
                return Err(self.broken("stream already handed over"));
            };
            // The message is gone before the end-of-stream read, which is boxed: only the delta
            // is held across it, and this future's size is copied on every token.
            let (delta, complete) = match stream.message().await {
                Ok(Some(m)) => match m.response {
                    Some(pb::generate_response::Response::Chunk(c)) => (self.chunk(c)?, false),
                    Some(pb::generate_response::Response::Complete(c)) => (self.complete(c)?, true),
                    None => (None, false),
                },
                Ok(None) => return Err(self.broken("stream ended before the generation finished")),
                Err(s) => return Err(status_error(&self.worker, s, Phase::Stream)),
            };
            if complete {
                Box::pin(self.read_end()).await;
            }
            if let Some(delta) = delta {
                return Ok(Some(delta));
            }
        }
    }

    fn chunk(&mut self, c: pb::GenerateStreamChunk) -> Result<Option<Delta>, UpstreamError> {
        // A chunk's logprobs are its new tokens'.
        let logprobs = self.logprobs(c.output_logprobs.as_ref(), c.token_ids.len());
        self.take(
            c.token_ids,
            c.completion_tokens,
            c.prompt_tokens,
            c.cached_tokens,
            None,
            logprobs,
        )
    }

    /// The entries of the last `new` tokens in `l` (a chunk holds only its own tokens'; the
    /// `complete` holds every token's).
    fn logprobs(&self, l: Option<&pb::OutputLogProbs>, new: usize) -> Vec<TokenLogprob> {
        let Some(l) = l else {
            return Vec::new();
        };
        let text = |id: u32| self.tokenizer.decode(&[id], false).unwrap_or_default();
        let skip = l.token_logprobs.len().saturating_sub(new);
        l.token_logprobs
            .iter()
            .zip(&l.token_ids)
            .enumerate()
            .skip(skip)
            .map(|(i, (logprob, id))| TokenLogprob {
                token: text(*id),
                logprob: f64::from(*logprob),
                top: l
                    .top_logprobs
                    .get(i)
                    .map(|t| {
                        t.token_ids
                            .iter()
                            .zip(&t.values)
                            .map(|(id, v)| (text(*id), f64::from(*v)))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// The finish. Its `output_ids` are the last chunk's again (the servicer builds both from
    /// one engine output): only ids beyond what the chunks brought are new, which also reads a
    /// servicer that sends everything in `complete` right.
    fn complete(&mut self, c: pb::GenerateComplete) -> Result<Option<Delta>, UpstreamError> {
        let finish = wire::finish_reason(&c);
        if let FinishReason::Abort { .. } = finish {
            self.finished = true;
            return Err(UpstreamError::Aborted {
                message: "the worker aborted the request".into(),
                status: None,
            });
        }
        let have = self.completion_tokens.max(self.ids.len() as u32);
        let missing = c.completion_tokens.saturating_sub(have) as usize;
        let start = c.output_ids.len().saturating_sub(missing);
        let new_ids = c.output_ids.get(start..).unwrap_or(&[]).to_vec();
        let logprobs = self.logprobs(c.output_logprobs.as_ref(), new_ids.len());
        self.take(
            new_ids,
            c.completion_tokens,
            c.prompt_tokens,
            c.cached_tokens,
            Some(finish),
            logprobs,
        )
    }

    fn take(
        &mut self,
        new_ids: Vec<u32>,
        completion_tokens: u32,
        prompt_tokens: u32,
        cached_tokens: u32,
        mut finish: Option<FinishReason>,
        logprobs: Vec<TokenLogprob>,
    ) -> Result<Option<Delta>, UpstreamError> {
        let url = &self.worker.url;
        let protocol = |e: crate::tokenize::TokenizeError| UpstreamError::Protocol {
            url: url.clone(),
            reason: e.to_string(),
        };
        let decoded = self.detok.push(&new_ids).map_err(protocol)?;
        let mut text = decoded.text.to_owned();
        let matched = decoded.matched_stop.map(str::to_owned);
        self.ids.extend_from_slice(&new_ids);
        let total = completion_tokens.max(self.ids.len() as u32);
        let new_tokens = total.saturating_sub(self.completion_tokens);
        self.completion_tokens = total;
        if let Some(m) = matched {
            // Our decoder hit a stop string: the answer is over for the client.
            self.stopped_here = finish.is_none();
            finish = Some(FinishReason::Stop {
                matched: Some(m.into()),
            });
        } else if finish.is_some() {
            let rest = self.detok.finish().map_err(protocol)?;
            text.push_str(rest.text);
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
            prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens.unwrap_or(cached_tokens),
            logprobs,
        }))
    }

    /// Reads the stream's end (its OK status) after `complete`, so the call ends cleanly rather
    /// than being cancelled (which the servicer would log and answer with an abort).
    async fn read_end(&mut self) {
        if let Some(stream) = self.stream.as_mut() {
            let _ = tokio::time::timeout(END_WAIT, stream.message()).await;
        }
    }

    /// The client left: keeps reading what the worker still sends until our abort lands (at
    /// most `LEFTOVER_WAIT`), adding the tokens it generated for nobody to `counter`.
    pub fn count_leftover(&mut self, counter: prometheus::IntCounter) {
        if self.finished {
            return;
        }
        let Some(mut stream) = self.stream.take() else {
            return;
        };
        let received = self.completion_tokens;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut last = received;
            let read = async {
                while let Ok(Some(m)) = stream.message().await {
                    let count = match m.response {
                        Some(pb::generate_response::Response::Chunk(c)) => c.completion_tokens,
                        Some(pb::generate_response::Response::Complete(c)) => c.completion_tokens,
                        None => 0,
                    };
                    last = last.max(count);
                }
            };
            let _ = tokio::time::timeout(LEFTOVER_WAIT, read).await;
            counter.inc_by(u64::from(last.saturating_sub(received)));
        });
    }

    /// Our decoder, in the state it reached (a continued leg goes on from it).
    pub fn take_decoder(&mut self) -> Option<IncrementalDecoder> {
        Some(self.detok.clone())
    }

    pub fn output_ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn stopped_here(&self) -> bool {
        self.stopped_here
    }

    fn broken(&self, reason: &str) -> UpstreamError {
        UpstreamError::Disconnected {
            url: self.worker.url.clone(),
            reason: reason.to_owned(),
        }
    }
}
