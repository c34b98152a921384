//! The `Generate` RPC as `smg-grpc-servicer` answers it: streamed, one `chunk` per engine
//! update whose `token_ids` are the new tokens only (counts cumulative), and at the end the
//! last chunk followed by a `complete` carrying the same last ids, the finish reason and the
//! usage; not streamed, one `complete` with every output id. Refusals end the call with a gRPC
//! status (a full queue is UNAVAILABLE, bad input INVALID_ARGUMENT, the injected 500 INTERNAL);
//! an abort asked for with the `Abort` RPC is a completion with finish reason "abort". A client
//! that cancels the call drops the stream, and with it the engine's request.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tonic::{Code, Status};

use super::RESET_MARKER;
use crate::protocol::grpc::{grpc_code, pb};
use crate::protocol::sglang::FinishReason;
use crate::sim::logprobs::{sampled_logprob, top_tokens};
use crate::sim::run::{Run, RunError};
use crate::sim::state::SimState;
use crate::sim::validate;

pub type GenerateStream = Pin<Box<dyn Stream<Item = Result<pb::GenerateResponse, Status>> + Send>>;

/// Checks and admits the request; the stream then follows the run.
pub fn start(state: &Arc<SimState>, req: pb::GenerateRequest) -> Result<GenerateStream, Status> {
    let Some(tokenized) = req.tokenized else {
        return Err(Status::invalid_argument("Tokenized input must be provided"));
    };
    let prompt = tokenized.input_ids;
    if prompt.is_empty() {
        return Err(Status::invalid_argument("The input is empty."));
    }
    if req.return_hidden_states {
        // Not simulated; refused rather than answered without them.
        return Err(Status::invalid_argument(
            "hidden states are not simulated over gRPC",
        ));
    }
    let logprobs = req.return_logprob.then(|| Logprobs {
        top: usize::try_from(req.top_logprobs_num).unwrap_or(0),
        vocab: state.tokenizer.vocab_size(),
    });
    let params = req
        .sampling_params
        .as_ref()
        .map(crate::protocol::grpc::from_proto)
        .unwrap_or_default();
    if params.n.unwrap_or(1) > 1 {
        return Err(Status::invalid_argument("n > 1 is not simulated over gRPC"));
    }
    validate::sampling(&params)
        .and_then(|()| {
            validate::lengths(
                state.version,
                prompt.len(),
                params.max_new_tokens,
                state.context_length,
            )
        })
        .map_err(Status::invalid_argument)?;
    let rid = if req.request_id.is_empty() {
        uuid::Uuid::new_v4().simple().to_string()
    } else {
        req.request_id
    };
    // The servicer hands the pin to the engine: a data-parallel worker runs it on that rank.
    let mut run = Run::start_pd(
        state,
        "grpc Generate",
        rid.clone(),
        prompt,
        &params,
        &Default::default(),
        req.data_parallel_rank.map(i64::from),
    )
    .map_err(refusal)?;
    run.set_streaming(req.stream);
    let stream = Streamed {
        run,
        rid,
        stream: req.stream,
        sent: 0,
        logprobs,
        complete_next: None,
        over: false,
    };
    Ok(Box::pin(futures_util::stream::unfold(
        stream,
        |mut s| async move { s.next().await.map(|item| (item, s)) },
    )))
}

/// The engine's refusals, as the servicer's status table maps their HTTP statuses.
fn refusal(e: RunError) -> Status {
    let status = match e {
        RunError::QueueFull => 503,
        RunError::BadRequest(_) | RunError::FrontEnd(_) => 400,
        RunError::Injected => 500,
    };
    Status::new(grpc_code(status), e.to_string())
}

struct Streamed {
    run: Run,
    rid: String,
    stream: bool,
    /// Output ids already sent in chunks.
    sent: usize,
    logprobs: Option<Logprobs>,
    /// The `complete` due after the last chunk.
    complete_next: Option<pb::GenerateResponse>,
    over: bool,
}

impl Streamed {
    async fn next(&mut self) -> Option<Result<pb::GenerateResponse, Status>> {
        if let Some(complete) = self.complete_next.take() {
            self.over = true;
            return Some(Ok(complete));
        }
        if self.over {
            return None;
        }
        loop {
            let update = match self.run.next().await {
                Ok(update) => update,
                Err(_die) => {
                    self.over = true;
                    let mut status = Status::new(Code::Unavailable, "injected fault: reset");
                    status.metadata_mut().insert(
                        RESET_MARKER,
                        tonic::metadata::MetadataValue::from_static("1"),
                    );
                    return Some(Err(status));
                }
            };
            let finished = update.as_ref().is_none_or(|u| u.finished);
            if !self.stream && !finished {
                continue; // not streamed: one `complete` at the end
            }
            if !finished {
                return Some(Ok(self.chunk()));
            }
            let complete = self.complete();
            if !self.stream {
                self.over = true;
                return Some(Ok(complete));
            }
            self.complete_next = Some(complete);
            return Some(Ok(self.chunk()));
        }
    }

    /// The ids since the last chunk, with the counts so far.
    fn chunk(&mut self) -> pb::GenerateResponse {
        let ids = self.run.output_ids();
        let new = ids.get(self.sent..).unwrap_or(&[]).to_vec();
        let output_logprobs = self.logprobs.as_ref().map(|l| l.of(&new, self.sent));
        self.sent = ids.len();
        pb::GenerateResponse {
            request_id: self.rid.clone(),
            response: Some(pb::generate_response::Response::Chunk(
                pb::GenerateStreamChunk {
                    token_ids: new,
                    prompt_tokens: count(self.run.prompt_tokens),
                    completion_tokens: count(self.run.produced),
                    cached_tokens: count(self.run.cached_tokens),
                    output_logprobs,
                    ..Default::default()
                },
            )),
        }
    }

    /// The finish: streamed, its `output_ids` are the last chunk's (the servicer builds both
    /// from the same engine output); not streamed, all of them.
    fn complete(&self) -> pb::GenerateResponse {
        let output_ids = if self.stream {
            self.run
                .output_ids()
                .get(self.sent..)
                .unwrap_or(&[])
                .to_vec()
        } else {
            self.run.output_ids().to_vec()
        };
        let (finish_reason, matched_stop) = match self.run.finish_reason() {
            Some(FinishReason::Length { .. }) => ("length", None),
            Some(FinishReason::Abort { .. }) => ("abort", None),
            Some(FinishReason::Stop { matched }) => ("stop", matched.and_then(matched_stop)),
            None => ("stop", None),
        };
        pb::GenerateResponse {
            request_id: self.rid.clone(),
            response: Some(pb::generate_response::Response::Complete(
                pb::GenerateComplete {
                    output_ids,
                    finish_reason: finish_reason.to_owned(),
                    prompt_tokens: count(self.run.prompt_tokens),
                    completion_tokens: count(self.run.produced),
                    cached_tokens: count(self.run.cached_tokens),
                    matched_stop,
                    // Cumulative, as the servicer sends them with `complete`.
                    output_logprobs: self
                        .logprobs
                        .as_ref()
                        .map(|l| l.of(self.run.output_ids(), 0)),
                    ..Default::default()
                },
            )),
        }
    }
}

/// `return_logprob`: the sim's modelled logprobs (`sim::logprobs`) for the output tokens.
struct Logprobs {
    top: usize,
    vocab: usize,
}

impl Logprobs {
    /// The entries of `ids`, the output tokens from position `first` on.
    fn of(&self, ids: &[u32], first: usize) -> pb::OutputLogProbs {
        let positions = ids.iter().enumerate().map(|(i, &id)| (id, first + i));
        pb::OutputLogProbs {
            token_logprobs: positions
                .clone()
                .map(|(id, p)| sampled_logprob(id, p) as f32)
                .collect(),
            token_ids: ids.to_vec(),
            top_logprobs: if self.top == 0 {
                Vec::new()
            } else {
                positions
                    .map(|(id, p)| {
                        let (token_ids, values) =
                            top_tokens(id, p, self.top, self.vocab).into_iter().fold(
                                (Vec::new(), Vec::new()),
                                |(mut ids, mut values), (other, l)| {
                                    ids.push(other);
                                    values.push(l as f32);
                                    (ids, values)
                                },
                            );
                        pb::TopLogProbs { values, token_ids }
                    })
                    .collect()
            },
            token_ids_logprobs: Vec::new(),
        }
    }
}

fn matched_stop(v: serde_json::Value) -> Option<pb::generate_complete::MatchedStop> {
    use pb::generate_complete::MatchedStop;
    match v {
        serde_json::Value::String(s) => Some(MatchedStop::MatchedStopStr(s)),
        serde_json::Value::Number(n) => n
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .map(MatchedStop::MatchedTokenId),
        _ => None,
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
