//! `POST /generate`: SGLang's native route, JSON or SSE, cumulative or incremental output.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::run::{Run, RunError};
use super::server::{bad_request, json, sse_response, SimState};
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
}

pub async fn generate(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let input: GenerateInput = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad_request(&e.to_string()),
    };
    // SGLang 0.5.23 rejects unknown sampling keys with a plain-string `error`.
    let params: SamplingParams = match input
        .sampling_params
        .map(serde_json::from_value)
        .transpose()
    {
        Ok(p) => p.unwrap_or_default(),
        Err(e) => {
            return json(
                axum::http::StatusCode::BAD_REQUEST,
                &serde_json::json!({ "error": e.to_string() }),
            )
        }
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
    let rid = input
        .rid
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let with_text = !state.skip_tokenizer_init;
    let mut params = params;
    if state.skip_tokenizer_init {
        // Without a tokenizer SGLang cannot match stop strings; the caller must.
        params.stop.clear();
    }
    let mut run = match Run::start(&state, rid, prompt, &params) {
        Ok(run) => run,
        Err(e) => return run_error(e),
    };
    if !input.stream {
        if run.complete().await.is_err() {
            return super::server::reset();
        }
        return json(axum::http::StatusCode::OK, &output(&run, 0, 0, with_text));
    }
    let incremental = state.incremental_output;
    let stream = futures_util::stream::unfold(Some((run, 0usize, 0usize)), move |st| async move {
        let (mut run, sent_ids, sent_text) = st?;
        match run.next().await {
            Ok(Some(_)) => {
                let (ids_from, text_from) = if incremental {
                    (sent_ids, sent_text)
                } else {
                    (0, 0)
                };
                let chunk = sse::json_event(&output(&run, ids_from, text_from, with_text));
                let next = (run.produced, run.text().len());
                Some((Ok(chunk), Some((run, next.0, next.1))))
            }
            Ok(None) if run.aborted => {
                let chunk =
                    sse::json_event(&output(&run, run.produced, run.text().len(), with_text));
                Some((Ok(chunk), None))
            }
            Ok(None) => None,
            Err(fault) => Some((Err(fault), None)),
        }
    });
    sse_response(stream)
}

fn output(run: &Run, ids_from: usize, text_from: usize, with_text: bool) -> GenerateOutput<'_> {
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
        },
    }
}

/// Errors before the first token, in SGLang's shapes.
pub fn run_error(e: RunError) -> Response {
    use axum::http::StatusCode;
    match e {
        RunError::BadRequest(msg) => json(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({ "error": { "message": msg } }),
        ),
        RunError::QueueFull => json(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({"object":"error","message":"The request queue is full.","type":"503","param":null,"code":503}),
        ),
        RunError::Injected => {
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
    }
}
