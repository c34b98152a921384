//! A generation gathered into one OpenAI JSON answer (non-streaming clients).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::format::Formatter;
use super::Generation;
use crate::error::GatewayError;
use crate::reasoning::{self, Format};

/// Errors are rendered here rather than returned: the generation has already counted them.
/// With a reasoning `Format`, the text is split into the message's reasoning and content.
pub async fn respond(
    mut generation: Generation,
    format: Formatter,
    reasoning: Option<Format>,
) -> Response {
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
    let body = match reasoning {
        Some(f) => {
            let split = reasoning::split_whole(f, &text);
            format.complete(&split.content, Some(&split.reasoning), finish, usage)
        }
        None => format.complete(&text, None, finish, usage),
    };
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
