//! SGLang answers some refusals after its 200: a `/generate` stream whose request fails
//! validation gets `data: {"error": …}`, a full queue an abort chunk with `status_code: 503`,
//! and 0.5.9's OpenAI chat route cuts the stream before any event when the queue is full. So a
//! forwarded stream is read up to its first event before the client's response starts: then
//! such a refusal is still an error with the status the worker meant (400 for the client's
//! input, 503 to try another worker), not a 200 with a broken stream.

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::Response;

use super::{Body, UpstreamError};
use crate::protocol::sglang::{error_event, status_abort};
use crate::stream::sse::SseParser;

/// Largest first event we wait for; bigger ones are passed on unread.
const MAX_FIRST_EVENT_BYTES: usize = 1024 * 1024;

/// A worker's response, and for an SSE stream the bytes already read up to its first event
/// (to be sent to the client before the rest of the body).
pub struct Opened {
    pub response: Response<Body>,
    pub head: Bytes,
}

/// An SSE event that is not a chunk: the worker's error, with its status when it said one.
pub fn refusal(data: &[u8]) -> UpstreamError {
    match error_event(data) {
        Some(e) => UpstreamError::Aborted {
            message: e.message,
            status: Some(e.status),
        },
        None => UpstreamError::Aborted {
            message: String::from_utf8_lossy(data).into_owned(),
            status: None,
        },
    }
}

/// Reads an SSE response up to its first event; other responses are returned untouched.
pub async fn read(mut response: Response<Body>, url: &str) -> Result<Opened, UpstreamError> {
    let is_sse = response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut head = BytesMut::new();
    if !is_sse {
        return Ok(Opened {
            response,
            head: head.freeze(),
        });
    }
    let mut parser = SseParser::new(MAX_FIRST_EVENT_BYTES);
    loop {
        match parser.next_event() {
            Ok(Some(ev)) if ev.is_done() => break,
            Ok(Some(ev)) => {
                if let Some(e) = error_event(&ev.data).or_else(|| status_abort(&ev.data)) {
                    return Err(UpstreamError::Aborted {
                        message: e.message,
                        status: Some(e.status),
                    });
                }
                break;
            }
            Ok(None) => {}
            // Too big to be a refusal: the relay parses (and passes on) the rest.
            Err(_) => break,
        }
        match response.body_mut().frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    parser.push(&data);
                    head.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => {
                return Err(UpstreamError::Disconnected {
                    url: url.to_owned(),
                    reason: e.to_string(),
                })
            }
            // Ended before any event: nothing was generated for anyone, so it may run elsewhere.
            None => {
                return Err(UpstreamError::NoResponse {
                    url: url.to_owned(),
                    reason: "the stream ended before its first event".into(),
                })
            }
        }
    }
    Ok(Opened {
        response,
        head: head.freeze(),
    })
}
