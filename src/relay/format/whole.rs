//! A whole (non-streamed) answer: its choices and the object around them.

use super::{Formatter, Kind};
use crate::protocol::openai::{
    AssistantMessage, ChatChoice, ChatCompletion, FunctionOut, TextChoice, TextCompletion,
    ToolCallOut, Usage,
};
use crate::tool_calls::ToolCall;

impl Formatter {
    /// The whole answer as one JSON object; `reasoning` is set when a reasoning parser split
    /// `text` from it, `calls` when a tool-call parser read it (chat only).
    pub fn complete(
        &self,
        text: &str,
        reasoning: Option<&str>,
        calls: Option<&[ToolCall]>,
        finish: &'static str,
        usage: Usage,
    ) -> Vec<u8> {
        self.with_choice(text, reasoning, calls, finish, |c| {
            self.envelope([c], usage)
        })
    }

    /// This formatter's choice of a whole answer, handed to `f` (it borrows what is built here).
    pub fn with_choice<R>(
        &self,
        text: &str,
        reasoning: Option<&str>,
        calls: Option<&[ToolCall]>,
        finish: &'static str,
        f: impl FnOnce(WholeChoice<'_>) -> R,
    ) -> R {
        // Split, either part may be empty: SGLang sends `null` for an empty one.
        let content = match (reasoning, calls) {
            (None, None) => Some(text),
            _ if text.is_empty() => None,
            _ => Some(text),
        };
        let ids: Vec<String> = (0..calls.map_or(0, <[_]>::len))
            .map(|i| self.call_id(i))
            .collect();
        let tool_calls: Vec<ToolCallOut<'_>> = calls
            .unwrap_or_default()
            .iter()
            .zip(&ids)
            .map(|(call, id)| ToolCallOut {
                id,
                kind: "function",
                function: FunctionOut {
                    name: &call.name,
                    arguments: &call.arguments,
                },
            })
            .collect();
        match self.kind {
            Kind::Chat => f(WholeChoice::Chat(ChatChoice {
                index: self.index,
                message: AssistantMessage {
                    role: "assistant",
                    content,
                    reasoning_content: reasoning.filter(|r| !r.is_empty()),
                    tool_calls: &tool_calls,
                },
                logprobs: self.take_logprobs(),
                finish_reason: finish,
            })),
            Kind::Completion => f(WholeChoice::Text(TextChoice {
                index: self.index,
                text: &self.echoed(text),
                logprobs: self.take_logprobs(),
                finish_reason: Some(finish),
            })),
        }
    }

    /// The whole-answer object around `choices` (one, or each choice's of a request with
    /// several).
    pub fn envelope<C: serde::Serialize>(&self, choices: C, usage: Usage) -> Vec<u8> {
        let out = match self.kind {
            Kind::Chat => serde_json::to_vec(&ChatCompletion {
                id: &self.id,
                object: "chat.completion",
                created: self.created,
                model: &self.model,
                choices,
                usage,
            }),
            Kind::Completion => serde_json::to_vec(&TextCompletion {
                id: &self.id,
                object: "text_completion",
                created: self.created,
                model: &self.model,
                choices,
                usage,
            }),
        };
        out.unwrap_or_default()
    }
}

/// One choice of a whole answer, in its kind's shape.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum WholeChoice<'a> {
    Chat(ChatChoice<'a>),
    Text(TextChoice<'a>),
}
