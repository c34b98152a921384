//! Reading and parsing a JSON request body, with OpenAI-style errors for every way it can be
//! wrong: too large, not JSON content, malformed, wrong types.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;

use super::limits::json_items_over;
use super::AppState;
use crate::error::GatewayError;
use crate::protocol::openai::sampling_aside::{TakeSampling, Taken};
use crate::protocol::openai::WithSampling;
use crate::tokenize::OFF_THREAD_BYTES;

/// The raw body of a JSON request.
pub struct JsonBytes(pub Bytes);

impl FromRequest<Arc<AppState>> for JsonBytes {
    type Rejection = GatewayError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let ct = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let mime = ct.split(';').next().unwrap_or("").trim();
        if !mime.eq_ignore_ascii_case("application/json") {
            return Err(GatewayError::UnsupportedMediaType);
        }
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let limit = state.limits.body_bytes;
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(GatewayError::PayloadTooLarge { limit });
        }
        match Bytes::from_request(req, state).await {
            Ok(b) if json_items_over(&b, state.limits.json_items) => {
                Err(GatewayError::TooManyJsonItems {
                    limit: state.limits.json_items,
                })
            }
            Ok(b) => Ok(JsonBytes(b)),
            Err(rejection) if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                Err(GatewayError::PayloadTooLarge { limit })
            }
            Err(rejection) => Err(GatewayError::invalid_body(
                format!("could not read the request body: {rejection}"),
                None,
            )),
        }
    }
}

/// Parses an OpenAI request, its sampling fields and the names of its extensions (top-level
/// fields neither knows), in one pass over the body when it is well formed.
pub fn parse_request<T: WithSampling>(bytes: &[u8]) -> Result<T, GatewayError> {
    let mut extensions = Vec::new();
    let mut taken = Taken::default();
    let text = std::str::from_utf8(bytes).ok();
    let parsed = text.and_then(|text| {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_ignored::deserialize(TakeSampling::new(&mut *de, &mut taken), |path| {
            if let serde_ignored::Path::Map {
                parent: serde_ignored::Path::Root,
                key,
            } = path
            {
                extensions.push(key.clone());
            }
        })
        .and_then(|req: T| de.end().map(|()| req))
        .ok()
    });
    // A body that failed is parsed again, the slow way, for an error that names the field.
    let (mut req, sampling) = match parsed {
        Some(req) => match taken.sampling() {
            Ok(sampling) => (req, sampling),
            Err(_) => (req, parse_naming_the_field(bytes)?),
        },
        None => (parse_naming_the_field(bytes)?, parse_checked(text, bytes)?),
    };
    req.set_sampling(sampling, extensions);
    Ok(req)
}

/// Runs `work` (parsing, templating, tokenizing a body of `len` bytes) on the blocking pool when
/// the body is large: milliseconds of it on an I/O thread would delay every stream that thread
/// serves.
pub async fn off_io_threads_if_large<T, F>(len: usize, work: F) -> Result<T, GatewayError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, GatewayError> + Send + 'static,
{
    if len < OFF_THREAD_BYTES {
        return work();
    }
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        GatewayError::Tokenize(crate::tokenize::TokenizeError::Encode(format!(
            "request preparation failed: {e}"
        )))
    })?
}

/// [`parse`], off the I/O threads for a large body.
pub async fn parse_off_thread<T: DeserializeOwned + Send + 'static>(
    body: Bytes,
) -> Result<T, GatewayError> {
    off_io_threads_if_large(body.len(), move || parse(&body)).await
}

/// Parses JSON, naming the offending field in `param` when there is one.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, GatewayError> {
    // The whole body is checked as UTF-8 at once (`from_str`), not each string on its own as
    // `from_slice` does: one pass instead of a call per key and value.
    parse_checked(std::str::from_utf8(bytes).ok(), bytes)
}

/// [`parse`] of a body already checked as UTF-8 (`text`, `None` if it is not).
fn parse_checked<T: DeserializeOwned>(text: Option<&str>, bytes: &[u8]) -> Result<T, GatewayError> {
    // Tracking the path costs on every field: only a body that fails is parsed again with it.
    text.and_then(|text| serde_json::from_str(text).ok())
        .map_or_else(|| parse_naming_the_field(bytes), Ok)
}

fn parse_naming_the_field<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, GatewayError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let param = (path != "." && !path.is_empty()).then_some(path);
        let what = if inner.is_syntax() || inner.is_eof() {
            "invalid JSON in request body"
        } else {
            "invalid request"
        };
        GatewayError::invalid_body(format!("{what}: {inner}"), param)
    })?;
    // Anything after the object (a second object, garbage) makes the body invalid.
    de.end().map_err(|e| {
        GatewayError::invalid_body(format!("invalid JSON in request body: {e}"), None)
    })?;
    Ok(value)
}
