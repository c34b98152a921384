//! A generation answered in SGLang's own `/generate` shape: how `/generate` is served in front
//! of gRPC workers, which have no `/generate` to forward to. One JSON object, or (streamed) SSE
//! events that each carry the whole text and ids so far, SGLang's default cumulative form, then
//! `[DONE]`. Errors before the first token are the handler's (the generation starts at it);
//! after it, an error event and no `[DONE]`, as on every stream.

use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;

use super::{pump, Generation};
use crate::error::GatewayError;
use crate::protocol::sglang::FinishReason;
use crate::stream::sse;

#[derive(Serialize)]
struct Output<'a> {
    text: &'a str,
    output_ids: &'a [u32],
    meta_info: Meta<'a>,
}

#[derive(Serialize)]
struct Meta<'a> {
    id: &'a str,
    finish_reason: Option<&'a FinishReason>,
    prompt_tokens: u32,
    completion_tokens: u32,
    cached_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    e2e_latency: Option<f64>,
}

/// What has been generated so far, in SGLang's form.
struct Answer {
    rid: String,
    start: Instant,
    text: String,
    finish: Option<FinishReason>,
}

impl Answer {
    fn write(&self, generation: &Generation, out: &mut Vec<u8>, event: bool) {
        let usage = generation.usage();
        let ids = generation.output_ids();
        let output = Output {
            text: &self.text,
            output_ids: &ids,
            meta_info: Meta {
                id: &self.rid,
                finish_reason: self.finish.as_ref(),
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cached_tokens: usage.prompt_tokens_details.cached_tokens,
                e2e_latency: self
                    .finish
                    .as_ref()
                    .map(|_| self.start.elapsed().as_secs_f64()),
            },
        };
        if event {
            sse::write_json_event(out, &output);
        } else if let Ok(body) = serde_json::to_vec(&output) {
            out.extend_from_slice(&body);
        }
    }
}

/// The whole answer as one JSON object.
pub async fn whole(mut generation: Box<Generation>, rid: String, start: Instant) -> Response {
    let mut answer = Answer {
        rid,
        start,
        text: String::new(),
        finish: None,
    };
    loop {
        match generation.next().await {
            Ok(Some(delta)) => {
                answer.text.push_str(&delta.text);
                if delta.finish.is_some() {
                    answer.finish = delta.finish;
                }
            }
            Ok(None) => break,
            Err(e) => return GatewayError::Upstream(e).into_response(),
        }
    }
    let mut body = Vec::new();
    answer.write(&generation, &mut body, false);
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The answer as SSE, one cumulative event per delta, read by the client's connection (`pump`).
pub fn stream(generation: Box<Generation>, rid: String, start: Instant) -> Response {
    let deadlines = generation.deadlines();
    let shutdown = generation.relay().shutdown.subscribe();
    let answer = Answer {
        rid,
        start,
        text: String::new(),
        finish: None,
    };
    let body = async_stream::stream! {
        let (mut generation, mut answer) = (generation, answer);
        loop {
            let mut out = Vec::with_capacity(512);
            match generation.next().await {
                Ok(Some(delta)) => {
                    answer.text.push_str(&delta.text);
                    let finished = delta.finish.is_some();
                    answer.finish = delta.finish;
                    answer.write(&generation, &mut out, true);
                    if finished {
                        out.extend_from_slice(sse::DONE);
                        yield Bytes::from(out);
                        break;
                    }
                    yield Bytes::from(out);
                }
                Ok(None) => {
                    out.extend_from_slice(sse::DONE);
                    yield Bytes::from(out);
                    break;
                }
                Err(e) => {
                    super::format::error_event(&mut out, &GatewayError::Upstream(e));
                    yield Bytes::from(out);
                    break;
                }
            }
        }
    };
    let (body, slot) = pump::spawn(body, deadlines, shutdown);
    let mut resp = super::stream::sse_headers(body);
    resp.extensions_mut().insert(slot);
    resp
}
