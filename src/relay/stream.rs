//! A generation relayed as OpenAI SSE: role chunk, content (and reasoning) deltas, finish chunk, optional
//! usage chunk, `[DONE]`, driven by its own task (`pump`). The client leaving (or falling behind
//! past the deadlines) drops the generation, which aborts the worker's request and releases its
//! load.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::format::{Formatter, Kind};
use super::pump;
use super::Generation;
use crate::error::GatewayError;
use crate::reasoning::{Format, Split, StreamSplitter};
use crate::stream::sse;

struct State {
    generation: Generation,
    format: Formatter,
    include_usage: bool,
    started: bool,
    /// Splits the text into reasoning and content when a reasoning parser is on.
    reasoning: Option<StreamSplitter>,
}

pub fn respond(
    generation: Generation,
    format: Formatter,
    include_usage: bool,
    reasoning: Option<Format>,
) -> Response {
    let deadlines = generation.deadlines();
    let shutdown = generation.relay().shutdown.subscribe();
    let state = State {
        generation,
        format,
        include_usage,
        started: false,
        reasoning: reasoning.map(StreamSplitter::new),
    };
    let body = futures_util::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        let mut out = Vec::with_capacity(512);
        if !st.started {
            st.started = true;
            st.format.role_chunk(&mut out);
        }
        let end = |out: Vec<u8>| Some((Bytes::from(out), None));
        loop {
            match st.generation.next().await {
                Ok(Some(delta)) => {
                    let finish = delta.finish.as_ref().map(|f| f.openai());
                    if let Some(splitter) = st.reasoning.as_mut() {
                        let mut split = splitter.push(&delta.text);
                        if finish.is_some() {
                            // The last text: what the splitter held back goes out now.
                            append(&mut split, splitter.finish());
                        }
                        split_chunks(&st.format, &mut out, &split);
                    } else if !delta.text.is_empty()
                        || (finish.is_some() && st.format.kind == Kind::Completion)
                    {
                        st.format.text_chunk(&mut out, &delta.text, finish);
                    }
                    if let Some(finish) = finish {
                        st.format.finish_chunk(&mut out, finish);
                        if st.include_usage {
                            let usage = st.generation.usage();
                            st.format.usage_chunk(&mut out, &usage);
                        }
                        out.extend_from_slice(sse::DONE);
                        return end(out);
                    }
                    if !out.is_empty() {
                        return Some((Bytes::from(out), Some(st)));
                    }
                }
                Ok(None) => {
                    if let Some(splitter) = st.reasoning.as_mut() {
                        split_chunks(&st.format, &mut out, &splitter.finish());
                    }
                    out.extend_from_slice(sse::DONE);
                    return end(out);
                }
                Err(e) => {
                    super::format::error_event(&mut out, &GatewayError::Upstream(e));
                    return end(out);
                }
            }
        }
    });
    let (body, slot) = pump::spawn(body, deadlines, shutdown);
    let mut resp = sse_headers(body);
    resp.extensions_mut().insert(slot);
    resp
}

fn append(split: &mut Split, more: Split) {
    split.reasoning.push_str(&more.reasoning);
    split.content.push_str(&more.content);
}

/// The reasoning first, then the content, each only when there is some (as SGLang).
fn split_chunks(format: &Formatter, out: &mut Vec<u8>, split: &Split) {
    if !split.reasoning.is_empty() {
        format.reasoning_chunk(out, &split.reasoning);
    }
    if !split.content.is_empty() {
        format.text_chunk(out, &split.content, None);
    }
}

pub fn sse_headers(body: Body) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        body,
    )
        .into_response()
}
