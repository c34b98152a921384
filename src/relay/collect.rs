//! A generation gathered into one OpenAI JSON answer (non-streaming clients).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::format::Formatter;
use super::Generation;
use crate::error::GatewayError;
use crate::reasoning::{self, Format};
use crate::tool_calls::{self, Reading};

/// Errors are rendered here rather than returned: the generation has already counted them.
/// With a reasoning `Format`, the text is split into the message's reasoning and content; with
/// a tool-call `Reading`, that content is read for calls.
pub async fn respond(
    mut generation: Generation,
    format: Formatter,
    reasoning: Option<Format>,
    tools: Option<Reading>,
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
    let (reasoning, content) = match reasoning {
        Some(f) => {
            let split = reasoning::split_whole(f, &text);
            (Some(split.reasoning), split.content)
        }
        None => (None, text),
    };
    let body = match tools {
        Some(reading) => {
            let parsed = tool_calls::parse_whole(&reading, &content);
            let finish = with_calls(finish, !parsed.calls.is_empty());
            let calls = Some(&parsed.calls[..]);
            format.complete(&parsed.content, reasoning.as_deref(), calls, finish, usage)
        }
        None => format.complete(&content, reasoning.as_deref(), None, finish, usage),
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

/// A generation that stopped on its own after making calls ends with `tool_calls`, as SGLang's
/// (a length cut stays `length`).
pub fn with_calls(finish: &'static str, called: bool) -> &'static str {
    if called && finish == "stop" {
        "tool_calls"
    } else {
        finish
    }
}
