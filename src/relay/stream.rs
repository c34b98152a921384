//! A generation relayed as OpenAI SSE: role chunk, content deltas, finish chunk, optional
//! usage chunk, `[DONE]`. Dropping the body (client gone) drops the generation, which aborts
//! the worker's request and releases its load.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};

use super::format::{Formatter, Kind};
use super::Generation;
use crate::error::GatewayError;
use crate::protocol::openai::Usage;
use crate::stream::sse;

struct State {
    generation: Generation,
    format: Formatter,
    include_usage: bool,
    started: bool,
}

pub fn respond(generation: Generation, format: Formatter, include_usage: bool) -> Response {
    let state = State {
        generation,
        format,
        include_usage,
        started: false,
    };
    let body = futures_util::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        let mut out = BytesMut::new();
        if !st.started {
            st.started = true;
            if let Some(role) = st.format.role_chunk() {
                out.extend_from_slice(&role);
            }
        }
        loop {
            match st.generation.next().await {
                Ok(Some(delta)) => {
                    let finish = delta.finish.as_ref().map(|f| f.openai());
                    if !delta.text.is_empty()
                        || (finish.is_some() && st.format.kind == Kind::Completion)
                    {
                        out.extend_from_slice(&st.format.text_chunk(&delta.text, finish));
                    }
                    if let Some(finish) = finish {
                        if let Some(chunk) = st.format.finish_chunk(finish) {
                            out.extend_from_slice(&chunk);
                        }
                        if st.include_usage {
                            let g = &st.generation;
                            let usage =
                                Usage::new(g.prompt_tokens, g.completion_tokens, g.cached_tokens);
                            out.extend_from_slice(&st.format.usage_chunk(&usage));
                        }
                        out.extend_from_slice(sse::DONE);
                        return Some((Ok::<Bytes, std::convert::Infallible>(out.freeze()), None));
                    }
                    if !out.is_empty() {
                        return Some((Ok(out.freeze()), Some(st)));
                    }
                }
                Ok(None) => {
                    out.extend_from_slice(sse::DONE);
                    return Some((Ok(out.freeze()), None));
                }
                Err(e) => {
                    out.extend_from_slice(&super::format::error_event(&GatewayError::Upstream(e)));
                    return Some((Ok(out.freeze()), None));
                }
            }
        }
    });
    sse_headers(Body::from_stream(body))
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
