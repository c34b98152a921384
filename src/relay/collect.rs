//! A generation gathered into one JSON answer in its API's shape (non-streaming clients).

use std::borrow::Cow;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::grammar::{Ending, Grammar, Whole};
use super::Generation;
use crate::error::GatewayError;
use crate::protocol::openai::Usage;
use crate::protocol::sglang::FinishReason;
use crate::reasoning::{self, Format};
use crate::tool_calls::{self, Reading};

/// Errors are rendered here rather than returned: the generation has already counted them.
/// With a reasoning `Format`, the text is split into the message's reasoning and content; with
/// a tool-call `Reading`, that content is read for calls.
pub async fn respond<G: Grammar>(
    mut generation: Box<Generation>,
    mut grammar: G,
    reasoning: Option<Format>,
    tools: Option<Reading>,
) -> Response {
    let mut text = String::new();
    let mut finish = None;
    loop {
        match generation.next().await {
            Ok(Some(delta)) => {
                grammar.logprobs(delta.logprobs);
                text.push_str(&delta.text);
                if delta.finish.is_some() {
                    finish = delta.finish;
                }
            }
            Ok(None) => break,
            Err(e) => return GatewayError::Upstream(e).into_response(),
        }
    }
    let usage = generation.usage();
    let body = answer(
        &text,
        finish.as_ref(),
        reasoning,
        tools.as_ref(),
        usage,
        |whole| grammar.whole(whole),
    );
    json_response(body)
}

/// One generation's whole `text` through the parsers (the reasoning split off with a
/// `Format`, the content read for calls with a `Reading`), handed to `f` as a [`Whole`].
pub(super) fn answer<R>(
    text: &str,
    finish: Option<&FinishReason>,
    reasoning: Option<Format>,
    tools: Option<&Reading>,
    usage: Usage,
    f: impl FnOnce(Whole<'_>) -> R,
) -> R {
    let (reasoning, content) = match reasoning {
        Some(format) => {
            let split = reasoning::split_whole(format, text);
            (Some(split.reasoning), Cow::Owned(split.content))
        }
        None => (None, Cow::Borrowed(text)),
    };
    let ending = |called: bool| match finish {
        Some(f) => Ending::new(f, called),
        None => Ending::stopped(),
    };
    match tools {
        Some(reading) => {
            let parsed = tool_calls::parse_whole(reading, &content);
            f(Whole {
                content: &parsed.content,
                reasoning: reasoning.as_deref(),
                calls: Some(&parsed.calls),
                ending: ending(!parsed.calls.is_empty()),
                usage,
            })
        }
        None => f(Whole {
            content: &content,
            reasoning: reasoning.as_deref(),
            calls: None,
            ending: ending(false),
            usage,
        }),
    }
}

/// A whole answer's JSON body, as a 200.
pub(super) fn json_response(body: Vec<u8>) -> Response {
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
