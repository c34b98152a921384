//! Replies every route shares: JSON bodies, SGLang's error shapes, and the one stream skeleton
//! that turns a run into a response (a JSON body once it finished, or an SSE event stream),
//! written by a per-route [`Format`].

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::json;
use std::time::Duration;

use super::run::{Run, RunError, StreamFault, Update};
use super::shapes::ErrorObject;
use crate::stream::sse;

pub fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

pub fn bad_request(message: &str) -> Response {
    json(
        StatusCode::BAD_REQUEST,
        &json!({ "error": { "message": message } }),
    )
}

/// Errors before the first token, in SGLang's shapes.
pub fn run_error(e: RunError) -> Response {
    match e {
        RunError::BadRequest(msg) | RunError::FrontEnd(msg) => bad_request(&msg),
        RunError::QueueFull => json(
            StatusCode::SERVICE_UNAVAILABLE,
            &ErrorObject::new("The request queue is full.", "503", 503),
        ),
        RunError::Injected => {
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
    }
}

/// How one route writes a run on the wire.
pub trait Format: Send + 'static {
    /// The whole answer of a non-streaming request, once the run is over.
    fn body<'r>(&'r self, run: &'r Run) -> impl Serialize + 'r;
    /// The SSE events for one update of a streaming request.
    fn update(&mut self, run: &Run, update: &Update, out: &mut Vec<u8>);
    /// The SSE events that close a stream an abort cut short.
    fn aborted(&mut self, run: &Run, out: &mut Vec<u8>);
}

/// Waits for the run and answers in JSON, or streams it as SSE ending with `data: [DONE]`.
/// The connection-reset fault breaks the connection instead, in either form.
pub async fn answer<F: Format>(mut run: Run, stream: bool, format: F) -> Response {
    run.set_streaming(stream);
    if !stream {
        let mut held = Unnoticed(Some(run));
        let Some(run) = held.0.as_mut() else {
            return reset();
        };
        if run.complete().await.is_err() {
            return reset();
        }
        if let Some((message, status)) = run.failure() {
            // A scheduler abort with a 5xx: FastAPI's HTTPException, rendered as SGLang's
            // `ErrorResponse` (its HTTPException handler).
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return json(
                code,
                &ErrorObject::new(message, &status.to_string(), status),
            );
        }
        return json(StatusCode::OK, &format.body(run));
    }
    let events = futures_util::stream::unfold(Some((run, format)), |st| async move {
        let (mut run, mut format) = st?;
        let mut out = Vec::new();
        match run.next().await {
            Ok(Some(update)) => {
                format.update(&run, &update, &mut out);
                Some((Ok(Bytes::from(out)), Some((run, format))))
            }
            Ok(None) if run.aborted => {
                format.aborted(&run, &mut out);
                Some((Ok(Bytes::from(out)), None))
            }
            Ok(None) => None,
            Err(fault) => Some((Err(fault), None)),
        }
    });
    let done = futures_util::stream::once(async { Ok(Bytes::from_static(sse::DONE)) });
    let body = Body::from_stream(events.chain(done));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// How often SGLang looks whether a non-streaming client is still there: it waits for the
/// request's output in slices of `SGLANG_REQUEST_STATE_WAIT_TIMEOUT` (4 s, `environ.py`) and
/// checks `request.is_disconnected()` after each empty one (`_wait_one_response`).
const DISCONNECT_CHECK: Duration = Duration::from_secs(4);

/// A non-streaming run whose client may leave: the handler is dropped at once, but SGLang
/// notices only at its next disconnect check, so the request runs on until then and is
/// aborted there (unless it finished first, or an `/abort_request` came).
struct Unnoticed(Option<Run>);

impl Drop for Unnoticed {
    fn drop(&mut self) {
        let Some(run) = self.0.take().filter(|r| !r.finished() && !r.aborted) else {
            return;
        };
        let waited = run.age().as_secs_f64();
        let check = DISCONNECT_CHECK.as_secs_f64();
        let next = Duration::from_secs_f64((waited / check).floor() * check + check - waited);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                tokio::time::sleep(next).await;
                drop(run); // its ticket aborts it in the engine
            });
        }
    }
}

/// A stream that is over before it began: a 200 with `events` (a refusal SGLang sends after
/// its headers), then `data: [DONE]`.
pub fn sse_once(mut events: Vec<u8>) -> Response {
    events.extend_from_slice(sse::DONE);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        events,
    )
        .into_response()
}

/// A stream whose handler raised after the 200 was sent: headers, then the connection breaks
/// with no event and no `[DONE]` (an uncaught exception inside a Starlette `StreamingResponse`).
pub fn cut_stream() -> Response {
    // The headers go out while the body waits; then it fails.
    let failing = futures_util::stream::once(async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Err::<Bytes, _>(StreamFault::Die)
    });
    let mut resp = Response::new(Body::from_stream(failing));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    resp
}

/// A non-streaming answer cut by the connection-reset fault: a body that errors at once, so
/// hyper drops the connection without a complete response.
pub fn reset() -> Response {
    let failing = futures_util::stream::once(async { Err::<Bytes, _>(StreamFault::Die) });
    Response::new(Body::from_stream(failing))
}
