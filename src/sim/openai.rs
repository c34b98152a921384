//! The simulator's `/v1/chat/completions` and `/v1/completions`, in SGLang's OpenAI shapes
//! (bare-hex ids, a separate finish chunk for chat, `matched_stop`, usage only when asked).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::generate::run_error;
use super::run::Run;
use super::server::{json, sse_response, SimState};
use crate::protocol::openai::{
    ChatCompletionRequest, CompletionRequest, Prompt, Sampling, WithSampling,
};
use crate::protocol::sampling::requested_max_tokens;
use crate::stream::sse;
use crate::tokenize::ChatTemplateInput;

fn parse<T: WithSampling>(body: &[u8]) -> Result<T, serde_json::Error> {
    let mut req: T = serde_json::from_slice(body)?;
    req.set_sampling(serde_json::from_slice(body)?);
    Ok(req)
}

/// SGLang accepts a client-chosen `rid` in OpenAI bodies too.
fn rid_of(other: &serde_json::Map<String, Value>) -> Option<String> {
    other.get("rid").and_then(Value::as_str).map(str::to_owned)
}

/// SGLang's OpenAI error shape.
fn oai_error(status: StatusCode, message: &str) -> Response {
    json(
        status,
        &json!({"object":"error","message":message,"type":"BadRequest","param":null,"code":status.as_u16()}),
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Text,
}

pub async fn chat(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let req: ChatCompletionRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    if req.messages.is_empty() {
        return oai_error(StatusCode::BAD_REQUEST, "messages must not be empty");
    }
    let input = ChatTemplateInput {
        messages: &req.messages,
        tools: req.tools.as_ref(),
        add_generation_prompt: true,
        extra: req.chat_template_kwargs.as_ref(),
    };
    let prompt = match state.tokenizer.render_and_encode(&input) {
        Ok(ids) => ids,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let max = req.max_completion_tokens.or(req.sampling.max_tokens);
    respond(
        state,
        Kind::Chat,
        req.model,
        prompt,
        &req.sampling,
        max,
        rid_of(&req.other),
        req.stream,
        req.stream_options.is_some_and(|o| o.include_usage),
    )
    .await
}

pub async fn completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let req: CompletionRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let prompt = match req.prompt {
        Prompt::Text(t) => match state.tokenizer.encode(&t, true) {
            Ok(ids) => ids,
            Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
        },
        Prompt::Ids(ids) => ids,
        _ => return oai_error(StatusCode::BAD_REQUEST, "batched prompts are not simulated"),
    };
    // OpenAI's completions default.
    let max = req.sampling.max_tokens.or(Some(16));
    respond(
        state,
        Kind::Text,
        req.model,
        prompt,
        &req.sampling,
        max,
        rid_of(&req.other),
        req.stream,
        req.stream_options.is_some_and(|o| o.include_usage),
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn respond(
    state: Arc<SimState>,
    kind: Kind,
    model: String,
    prompt: Vec<u32>,
    sampling: &Sampling,
    max_tokens: Option<i64>,
    rid: Option<String>,
    stream: bool,
    include_usage: bool,
) -> Response {
    if prompt.is_empty() {
        return oai_error(StatusCode::BAD_REQUEST, "The prompt is empty.");
    }
    let room = state.context_length.saturating_sub(prompt.len()).max(1) as u32;
    let max_new = match requested_max_tokens("max_tokens", max_tokens, state.context_length) {
        Ok(m) => m.unwrap_or(room),
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.message),
    };
    let params = match sampling.to_sglang(max_new) {
        Ok(p) => p,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.message),
    };
    let rid = rid.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let mut run = match Run::start(&state, rid, prompt, &params) {
        Ok(r) => r,
        Err(e) => return run_error(e),
    };
    let created = super::server::unix_now();
    if !stream {
        if run.complete().await.is_err() {
            return super::server::reset();
        }
        let usage = usage(&run, state.cache_report);
        let (finish, matched) = finish_fields(&run);
        let choice = match kind {
            Kind::Chat => {
                json!({"index":0,"message":{"role":"assistant","content":run.text(),"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":finish,"matched_stop":matched})
            }
            Kind::Text => {
                json!({"index":0,"text":run.text(),"logprobs":null,"finish_reason":finish,"matched_stop":matched})
            }
        };
        let object = if kind == Kind::Chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        let body = json!({"id":run.rid,"object":object,"created":created,"model":model,"choices":[choice],"usage":usage});
        return json(StatusCode::OK, &body);
    }
    let cache_report = state.cache_report;
    let stream = futures_util::stream::unfold(Some((run, 0usize)), move |st| {
        let model = model.clone();
        async move {
            let (mut run, sent) = st?;
            match run.next().await {
                Ok(Some(update)) => {
                    let text = &run.text()[sent.min(run.text().len())..];
                    let mut out = Vec::new();
                    let (finish, matched) = if update.finished {
                        finish_fields(&run)
                    } else {
                        (Value::Null, Value::Null)
                    };
                    match kind {
                        Kind::Chat => {
                            if sent == 0 && run.produced == update.new_tokens {
                                let delta = json!({"reasoning_content":null,"role":"assistant","content":""});
                                out.extend(chat_chunk(
                                    &run.rid,
                                    created,
                                    &model,
                                    delta,
                                    Value::Null,
                                    Value::Null,
                                ));
                            }
                            if !text.is_empty() {
                                let delta = json!({"reasoning_content":null,"content":text});
                                out.extend(chat_chunk(
                                    &run.rid,
                                    created,
                                    &model,
                                    delta,
                                    Value::Null,
                                    Value::Null,
                                ));
                            }
                            if update.finished {
                                out.extend(chat_chunk(
                                    &run.rid,
                                    created,
                                    &model,
                                    json!({"reasoning_content":null}),
                                    finish,
                                    matched,
                                ));
                            }
                        }
                        Kind::Text => {
                            let choice = json!({"index":0,"text":text,"logprobs":null,"finish_reason":finish,"matched_stop":matched});
                            out.extend(sse::json_event(&json!({"id":run.rid,"object":"text_completion","created":created,"model":model,"choices":[choice],"usage":null})));
                        }
                    }
                    if update.finished && include_usage {
                        let object = if kind == Kind::Chat {
                            "chat.completion.chunk"
                        } else {
                            "text_completion"
                        };
                        out.extend(sse::json_event(&json!({"id":run.rid,"object":object,"created":created,"model":model,"choices":[],"usage":usage(&run, cache_report)})));
                    }
                    let sent = run.text().len();
                    Some((Ok(Bytes::from(out)), Some((run, sent))))
                }
                Ok(None) if run.aborted => {
                    let chunk = match kind {
                        Kind::Chat => chat_chunk(
                            &run.rid,
                            created,
                            &model,
                            json!({"reasoning_content":null}),
                            json!("abort"),
                            Value::Null,
                        ),
                        Kind::Text => sse::json_event(
                            &json!({"id":run.rid,"object":"text_completion","created":created,"model":model,"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"abort","matched_stop":null}],"usage":null}),
                        ),
                    };
                    Some((Ok(chunk), None))
                }
                Ok(None) => None,
                Err(fault) => Some((Err(fault), None)),
            }
        }
    });
    sse_response(stream)
}

fn chat_chunk(
    id: &str,
    created: u64,
    model: &str,
    delta: Value,
    finish: Value,
    matched: Value,
) -> Bytes {
    sse::json_event(
        &json!({"id":id,"object":"chat.completion.chunk","created":created,"model":model,
        "choices":[{"index":0,"delta":delta,"logprobs":null,"finish_reason":finish,"matched_stop":matched}]}),
    )
}

fn finish_fields(run: &Run) -> (Value, Value) {
    use crate::protocol::sglang::FinishReason;
    match run.finish_reason() {
        Some(FinishReason::Stop { matched }) => (json!("stop"), matched.unwrap_or(Value::Null)),
        Some(f) => (json!(f.openai()), Value::Null),
        None => (Value::Null, Value::Null),
    }
}

fn usage(run: &Run, cache_report: bool) -> Value {
    let details = if cache_report {
        json!({"cached_tokens": run.cached_tokens})
    } else {
        Value::Null
    };
    json!({"prompt_tokens":run.prompt_tokens,"total_tokens":run.prompt_tokens + run.produced,"completion_tokens":run.produced,
        "prompt_tokens_details":details,"reasoning_tokens":0,"completion_tokens_details":null})
}
