//! `n > 1` on the OpenAI routes (parallel sampling). SGLang's tokenizer manager fans such a
//! request out into n sub-requests, each with a fresh random rid (`regenerate_rid`, so a
//! client's `rid` names none of them), and merges their outputs tagged with `index`
//! (`tokenizer_manager.py::_handle_batch_request`). The OpenAI handlers then answer:
//! - not streaming: n choices by `index`, the first sub-request's id, usage with the prompt
//!   counted once and the completions summed (`usage_processor.py::calculate_response_usage`);
//! - streaming: each sub-request's chunks under its own id as they come; chat holds every
//!   finish chunk back until all are done and then sends them in finish order under the id of
//!   the last output (`serving_chat.py::_generate_chat_stream`), completions send theirs inline
//!   (`serving_completions.py`); one usage chunk at the end when asked, summed the same way.
//!
//! Every choice is its own generation: choice `i` draws with seed `base + i`, `base` being the
//! client's `seed` or the prompt's hash, so the texts differ and each still re-encodes to its ids.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::Value;

use super::openai::{finish, Common};
use super::plan::hash_prompt;
use super::reply::{self, json, Format};
use super::run::{Run, RunError, StreamFault};
use super::shapes::{ChunkChoice, Delta, Envelope, Finish, Usage};
use super::state::SimState;
use crate::protocol::sglang::SamplingParams;
use crate::stream::sse;

/// Starts the n sub-requests; a refusal of any drops (and so aborts) the ones already started.
pub fn start(
    state: &Arc<SimState>,
    prompt: &[u32],
    params: &SamplingParams,
    n: i64,
    route: &'static str,
) -> Result<Vec<Run>, RunError> {
    let base = params
        .sampling_seed
        .unwrap_or_else(|| hash_prompt(prompt) as i64);
    (0..n)
        .map(|i| {
            let mut params = params.clone();
            params.sampling_seed = Some(base.wrapping_add(i));
            let rid = uuid::Uuid::new_v4().simple().to_string();
            Run::start(state, route, rid, prompt.to_vec(), &params)
        })
        .collect()
}

/// What a finished choice leaves for the closing events.
struct Done {
    index: u32,
    finish: Finish,
    prompt_tokens: usize,
    cached: usize,
    completion_tokens: usize,
}

/// The usage of all choices: the prompt (and its cached part) once, the completions summed.
fn summed(done: &[Done], mut first: Usage) -> Usage {
    let completion: usize = done.iter().map(|d| d.completion_tokens).sum();
    first.completion_tokens = completion;
    first.total_tokens = first.prompt_tokens + completion;
    first
}

/// The formats for `n` choices, each writing its own `index`.
fn formats<F: Format>(common: &Common, n: usize, route: fn(Common) -> F) -> Vec<F> {
    (0..n)
        .map(|i| {
            let mut own = common.clone();
            own.index = i as u32;
            own.parallel = true;
            own.include_usage = false;
            route(own)
        })
        .collect()
}

pub async fn answer<F: Format>(
    mut runs: Vec<Run>,
    stream: bool,
    common: Common,
    route: fn(Common) -> F,
) -> Response {
    let formats = formats(&common, runs.len(), route);
    for run in &mut runs {
        run.set_streaming(stream);
    }
    if stream {
        return answer_stream(runs, formats, common);
    }
    for run in &mut runs {
        if run.complete().await.is_err() {
            return reply::reset();
        }
    }
    let mut choices = Vec::new();
    let mut first = None;
    for (run, format) in runs.iter().zip(&formats) {
        let Ok(Value::Object(mut body)) = serde_json::to_value(format.body(run)) else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        if let Some(Value::Array(mut one)) = body.remove("choices") {
            choices.append(&mut one);
        }
        first.get_or_insert(body);
    }
    let Some(mut body) = first else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let done: Vec<Done> = runs.iter().enumerate().map(done_of).collect();
    let usage = summed(
        &done,
        common.usage_of(done[0].prompt_tokens, done[0].cached, 0),
    );
    body.insert("choices".into(), Value::Array(choices));
    body.insert(
        "usage".into(),
        serde_json::to_value(usage).unwrap_or(Value::Null),
    );
    json(StatusCode::OK, &body)
}

fn done_of((index, run): (usize, &Run)) -> Done {
    Done {
        index: index as u32,
        finish: if run.aborted && !run.finished() {
            Finish::abort()
        } else {
            finish(run)
        },
        prompt_tokens: run.prompt_tokens,
        cached: run.cached_tokens,
        completion_tokens: run.produced,
    }
}

/// One choice's events: its chunks as they come, and its [`Done`] with the last of them.
type Piece = Result<(Bytes, String, Option<Done>), StreamFault>;

fn answer_stream<F: Format>(runs: Vec<Run>, formats: Vec<F>, common: Common) -> Response {
    let n = runs.len();
    let choices = runs
        .into_iter()
        .zip(formats)
        .enumerate()
        .map(|(index, (run, format))| {
            futures_util::stream::unfold(Some((run, format)), move |st| async move {
                let (mut run, mut format) = st?;
                let mut out = Vec::new();
                let piece: Piece = match run.next().await {
                    Ok(Some(update)) => {
                        format.update(&run, &update, &mut out);
                        let done = update.finished.then(|| done_of((index, &run)));
                        Ok((Bytes::from(out), run.rid.clone(), done))
                    }
                    Ok(None) if run.aborted => {
                        format.aborted(&run, &mut out);
                        let done = done_of((index, &run));
                        Ok((Bytes::from(out), run.rid.clone(), Some(done)))
                    }
                    Ok(None) => return None,
                    Err(fault) => Err(fault),
                };
                let next = match &piece {
                    Ok((_, _, None)) => Some((run, format)),
                    _ => None,
                };
                Some((piece, next))
            })
            .boxed()
        });
    let mut done = Vec::new();
    let events = futures_util::stream::select_all(choices).map(move |piece| {
        let (bytes, rid, finished) = piece?;
        let Some(finished) = finished else {
            return Ok(bytes);
        };
        done.push(finished);
        if done.len() < n {
            return Ok(bytes);
        }
        let mut out = bytes.to_vec();
        closing(&common, &rid, &done, &mut out);
        Ok(Bytes::from(out))
    });
    let body = Body::from_stream(events.chain(futures_util::stream::once(async {
        Ok::<_, StreamFault>(Bytes::from_static(sse::DONE))
    })));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// After the last choice: chat's held finish chunks, then the usage chunk when asked, all
/// under `rid`, the sub-request that reported last.
fn closing(common: &Common, rid: &str, done: &[Done], out: &mut Vec<u8>) {
    let chat = common.chat;
    let object = if chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    if chat {
        for d in done {
            let choice = ChunkChoice {
                index: d.index,
                delta: Delta::default(),
                logprobs: None,
                finish: Finish {
                    finish_reason: d.finish.finish_reason,
                    matched_stop: d.finish.matched_stop.clone(),
                },
            };
            let chunk = Envelope {
                id: rid,
                object,
                created: common.created,
                model: &common.model,
                choices: vec![choice],
                usage: None,
            };
            sse::write_json_event(out, &chunk);
        }
    }
    if common.include_usage {
        let first = common.usage_of(done[0].prompt_tokens, done[0].cached, 0);
        let chunk = Envelope::<()> {
            id: rid,
            object,
            created: common.created,
            model: &common.model,
            choices: Vec::new(),
            usage: Some(Some(summed(done, first))),
        };
        sse::write_json_event(out, &chunk);
    }
}
