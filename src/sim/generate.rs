//! `POST /generate`: SGLang's native route, JSON or SSE, cumulative or incremental output.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::reply::{self, bad_request, json, run_error, Format};
use super::run::{Run, Update};
use super::state::SimState;
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
                StatusCode::BAD_REQUEST,
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
    let mut params = params;
    if state.skip_tokenizer_init {
        // Without a tokenizer SGLang cannot match stop strings; the caller must.
        params.stop.clear();
    }
    let run = match Run::start(&state, rid, prompt, &params) {
        Ok(run) => run,
        Err(e) => return run_error(e),
    };
    let format = Native {
        incremental: state.incremental_output,
        with_text: !state.skip_tokenizer_init,
        sent_ids: 0,
        sent_text: 0,
    };
    reply::answer(run, input.stream, format).await
}

/// SGLang's native output: every event is a whole `GenerateOutput`, cumulative unless
/// `--incremental-streaming-output`.
struct Native {
    incremental: bool,
    with_text: bool,
    /// Output ids and text bytes already sent.
    sent_ids: usize,
    sent_text: usize,
}

impl Format for Native {
    fn body<'r>(&'r self, run: &'r Run) -> impl Serialize + 'r {
        output(run, 0, 0, self.with_text)
    }

    fn update(&mut self, run: &Run, _: &Update, out: &mut Vec<u8>) {
        let (ids_from, text_from) = if self.incremental {
            (self.sent_ids, self.sent_text)
        } else {
            (0, 0)
        };
        sse::write_json_event(out, &output(run, ids_from, text_from, self.with_text));
        self.sent_ids = run.produced;
        self.sent_text = run.text().len();
    }

    fn aborted(&mut self, run: &Run, out: &mut Vec<u8>) {
        let last = output(run, run.produced, run.text().len(), self.with_text);
        sse::write_json_event(out, &last);
    }
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
