//! `POST /generate`: SGLang's native route, JSON or SSE, cumulative or incremental output.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::logprobs::{Native, NativeFields};
use super::reply::{self, bad_request, json, run_error, Format};
use super::run::{Run, RunError, Update};
use super::state::SimState;
use super::validate;
use crate::protocol::sglang::{FinishReason, SamplingParams};
use crate::stream::sse;

#[derive(Deserialize)]
struct GenerateInput {
    text: Option<Value>,
    input_ids: Option<Value>,
    sampling_params: Option<Value>,
    #[serde(default)]
    stream: bool,
    rid: Option<String>,
    #[serde(default)]
    return_logprob: bool,
    top_logprobs_num: Option<i64>,
    logprob_start_len: Option<i64>,
    #[serde(default)]
    return_text_in_logprobs: bool,
}

#[derive(Serialize)]
struct GenerateOutput<'a> {
    /// Absent with `--skip-tokenizer-init`: ids only, as SGLang sends then.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    output_ids: &'a [u32],
    meta_info: MetaOut<'a>,
}

#[derive(Serialize)]
struct MetaOut<'a> {
    id: &'a str,
    finish_reason: Option<FinishReason>,
    prompt_tokens: usize,
    weight_version: &'static str,
    completion_tokens: usize,
    cached_tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    e2e_latency: Option<f64>,
    #[serde(flatten)]
    logprobs: Option<NativeFields>,
}

pub async fn generate(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let input: GenerateInput = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&e.to_string()),
    };
    let params = match sampling_params(&state, input.sampling_params, input.stream) {
        Ok(p) => p,
        Err(refused) => return *refused,
    };
    let prompt = match (input.text, input.input_ids) {
        (None, Some(ids)) => match serde_json::from_value::<Vec<u32>>(ids) {
            Ok(ids) => ids,
            Err(_) => {
                return bad_request(
                    "input_ids must be a list of token ids (batch requests are not simulated)",
                )
            }
        },
        (Some(Value::String(text)), None) => match state.tokenizer.encode(&text, true) {
            Ok(ids) => ids,
            Err(e) => return bad_request(&e.to_string()),
        },
        (Some(_), None) => {
            return bad_request("text must be a string (batch requests are not simulated)")
        }
        _ => return bad_request("Exactly one of text or input_ids must be given."),
    };
    if prompt.is_empty() {
        return bad_request("The input is empty.");
    }
    // The front end's ValueErrors: a 400 for a plain request, an error event after a 200 for a
    // stream (`serve_generate_request` catches them inside `stream_results`).
    let checked = validate::sampling(&params).and_then(|()| {
        validate::lengths(
            state.version,
            prompt.len(),
            params.max_new_tokens,
            state.context_length,
        )
    });
    if let Err(message) = checked {
        if !input.stream {
            return bad_request(&message);
        }
        return error_event(&state, &message);
    }
    let logprobs = input.return_logprob.then(|| Native {
        tokenizer: Arc::clone(&state.tokenizer),
        top: input.top_logprobs_num.unwrap_or(0).max(0) as usize,
        with_text: input.return_text_in_logprobs,
        start: match input.logprob_start_len {
            Some(start) if start >= 0 => start as usize,
            _ => prompt.len() - 1,
        },
        prompt: prompt.clone(),
    });
    let rid = input
        .rid
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let mut params = params;
    if state.skip_tokenizer_init {
        // Without a tokenizer SGLang cannot match stop strings; the caller must.
        params.stop.clear();
    }
    let bootstrap = super::pd::Bootstrap::of(&body);
    let rank = super::dp::RankFields::of(&body).requested(state.version);
    let run = match Run::start_pd(
        &state,
        "/generate",
        rid.clone(),
        prompt,
        &params,
        &bootstrap,
        rank,
    ) {
        Ok(run) => run,
        // A duplicate rid or a bad DP rank is the front end's `ValueError`, like the checks above.
        Err(RunError::FrontEnd(message)) if input.stream => return error_event(&state, &message),
        // The scheduler's refusals reach a stream as an abort chunk after the 200
        // (`_wait_one_response` yields it for status 400 and 503).
        Err(e @ (RunError::QueueFull | RunError::BadRequest(_))) if input.stream => {
            let status = if matches!(e, RunError::QueueFull) {
                503
            } else {
                400
            };
            return reply::sse_once(abort_chunk(&rid, &e.to_string(), status));
        }
        Err(e) => return run_error(e),
    };
    let format = NativeFormat {
        logprobs,
        incremental: state.incremental_output,
        incremental_text: state.incremental_output && state.version.incremental_text(),
        with_text: !state.skip_tokenizer_init,
        sent_ids: 0,
        sent_text: 0,
    };
    reply::answer(run, input.stream, format).await
}

/// 0.5.23 rejects unknown keys with a plain-string `error` (its contract gate); 0.5.9 hands
/// them to `SamplingParams(**…)`, whose `TypeError` nobody catches: a 500, or a stream cut
/// after its headers.
fn sampling_params(
    state: &SimState,
    raw: Option<Value>,
    stream: bool,
) -> Result<SamplingParams, Box<Response>> {
    let Some(raw) = raw else {
        return Ok(SamplingParams::default());
    };
    serde_json::from_value::<SamplingParams>(raw).map_err(|e| {
        Box::new(
            if !state.version.rejects_unknown_sampling_keys() && is_unknown_field(&e) {
                if stream {
                    reply::cut_stream()
                } else {
                    (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
                }
            } else {
                json(
                    StatusCode::BAD_REQUEST,
                    &serde_json::json!({ "error": e.to_string() }),
                )
            },
        )
    })
}

fn is_unknown_field(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("unknown field")
}

/// A front-end `ValueError` in a stream: a 200 with the version's error event, then `[DONE]`.
fn error_event(state: &SimState, message: &str) -> Response {
    let mut out = Vec::new();
    sse::write_json_event(&mut out, &state.version.generate_error_event(message));
    reply::sse_once(out)
}

/// The chunk a scheduler abort with an HTTP status sends, then `[DONE]`.
fn abort_chunk(rid: &str, message: &str, status: u16) -> Vec<u8> {
    let chunk = GenerateOutput {
        text: Some(""),
        output_ids: &[],
        meta_info: MetaOut {
            id: rid,
            finish_reason: Some(FinishReason::Abort {
                message: Some(message.to_owned()),
                status_code: Some(status),
                err_type: None,
            }),
            prompt_tokens: 0,
            weight_version: "default",
            completion_tokens: 0,
            cached_tokens: 0,
            e2e_latency: Some(0.0),
            logprobs: None,
        },
    };
    let mut out = Vec::new();
    sse::write_json_event(&mut out, &chunk);
    out
}

/// SGLang's native output: every event is a whole `GenerateOutput`, cumulative unless
/// `--incremental-streaming-output`.
struct NativeFormat {
    logprobs: Option<Native>,
    incremental: bool,
    /// Text as deltas too (0.5.23); 0.5.9's `--stream-output` keeps it cumulative.
    incremental_text: bool,
    with_text: bool,
    /// Output ids and text bytes already sent.
    sent_ids: usize,
    sent_text: usize,
}

impl Format for NativeFormat {
    fn body<'r>(&'r self, run: &'r Run) -> impl Serialize + 'r {
        output(run, 0, 0, self)
    }

    fn update(&mut self, run: &Run, _: &Update, out: &mut Vec<u8>) {
        let ids_from = if self.incremental { self.sent_ids } else { 0 };
        let text_from = if self.incremental_text {
            self.sent_text
        } else {
            0
        };
        sse::write_json_event(out, &output(run, ids_from, text_from, self));
        self.sent_ids = run.produced;
        self.sent_text = run.text().len();
    }

    /// The abort chunk carries what was generated, in the stream's own form: everything so far
    /// when cumulative, nothing new when incremental.
    fn aborted(&mut self, run: &Run, out: &mut Vec<u8>) {
        let ids_from = if self.incremental { run.produced } else { 0 };
        let text_from = if self.incremental_text {
            run.text().len()
        } else {
            0
        };
        sse::write_json_event(out, &output(run, ids_from, text_from, self));
    }
}

fn output<'r>(
    run: &'r Run,
    ids_from: usize,
    text_from: usize,
    format: &NativeFormat,
) -> GenerateOutput<'r> {
    let with_text = format.with_text;
    let finish_reason = run.finish_reason();
    let e2e_latency = finish_reason.as_ref().map(|_| run.e2e_latency());
    GenerateOutput {
        text: with_text.then(|| &run.text()[text_from.min(run.text().len())..]),
        output_ids: &run.output_ids()[ids_from.min(run.produced)..],
        meta_info: MetaOut {
            id: &run.rid,
            finish_reason,
            prompt_tokens: run.prompt_tokens,
            weight_version: "default",
            completion_tokens: run.produced,
            cached_tokens: run.cached_tokens,
            e2e_latency,
            logprobs: format.logprobs.as_ref().map(|l| l.fields(run.output_ids())),
        },
    }
}
