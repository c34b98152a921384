//! A generation gathered into one OpenAI JSON answer (non-streaming clients).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::format::Formatter;
use super::Generation;
use crate::error::GatewayError;

/// Errors are rendered here rather than returned: the generation has already counted them.
pub async fn respond(mut generation: Generation, format: Formatter) -> Response {
    let mut text = String::new();
    let mut finish = "stop";
    loop {
        match generation.next().await {
            Ok(Some(delta)) => {
                text.push_str(&delta.text);
                if let Some(f) = &delta.finish {
                    finish = f.openai();
                }
            }
            Ok(None) => break,
            Err(e) => return GatewayError::Upstream(e).into_response(),
        }
    }
    let usage = generation.usage();
    let body = format.complete(&text, finish, usage);
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}
