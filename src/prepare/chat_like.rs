//! The part of chat's preparation the other front doors (Messages, Responses) share: their
//! request, already mapped into chat messages and tools, rendered, tokenized and bounded as a
//! chat request on the token-id path is.

use serde_json::Value;

use super::{check_text_fits, finish, string_bytes, Prepared, MAX_MESSAGES};
use crate::error::GatewayError;
use crate::model::Model;
use crate::protocol::openai::{Sampling, Tool};
use crate::protocol::sampling::invalid;
use crate::tokenize::ChatTemplateInput;
use crate::tool_calls::Reading;

/// A conversation that came through another API's front door (Anthropic Messages, OpenAI
/// Responses), already in chat's shape: prepared as a chat request on the token-id path is.
pub struct ChatLike<'a> {
    pub messages: &'a [Value],
    /// Rendered into the template; the output is read for calls with `reading`.
    pub tools: Option<&'a [Tool]>,
    pub reading: Option<Reading>,
    pub template_kwargs: Option<&'a serde_json::Map<String, Value>>,
    pub sampling: &'a Sampling,
    pub max: Option<i64>,
    pub max_param: &'static str,
    pub stream: bool,
    pub user: Option<String>,
}

pub fn chat_like(model: &Model, c: ChatLike<'_>) -> Result<Prepared, GatewayError> {
    if c.messages.len() > MAX_MESSAGES {
        return Err(invalid(
            "messages",
            format!("at most {MAX_MESSAGES} messages are allowed"),
        )
        .into());
    }
    let text_bytes: usize = c.messages.iter().map(string_bytes).sum();
    check_text_fits(model, text_bytes)?;
    let input = ChatTemplateInput {
        messages: c.messages,
        tools: c.tools,
        add_generation_prompt: true,
        extra: c.template_kwargs,
    };
    let prompt_ids = model.tokenizer.render_and_encode(&input)?;
    let reasoning = model
        .reasoning_parser
        .map(|kind| kind.format(c.template_kwargs));
    finish(
        model,
        prompt_ids,
        c.sampling,
        c.max,
        c.max_param,
        c.stream,
        false,
    )
    .map(|p| Prepared {
        user: c.user,
        reasoning,
        tool_calls: c.reading,
        ..p
    })
}
