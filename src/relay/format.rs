//! OpenAI response objects for one request: chat or text completion, streamed or whole.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::GatewayError;
use crate::protocol::openai::{
    AssistantMessage, ChatChoice, ChatChunk, ChatChunkChoice, ChatCompletion, Delta, TextChoice,
    TextChunk, TextCompletion, Usage,
};
use crate::stream::sse;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

pub struct Formatter {
    pub kind: Kind,
    /// `chatcmpl-<rid>` or `cmpl-<rid>`.
    pub id: String,
    pub created: u64,
    pub model: Arc<str>,
}

impl Formatter {
    pub fn new(kind: Kind, rid: &str, model: Arc<str>) -> Formatter {
        let prefix = if kind == Kind::Chat {
            "chatcmpl-"
        } else {
            "cmpl-"
        };
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Formatter {
            kind,
            id: format!("{prefix}{rid}"),
            created,
            model,
        }
    }

    /// Chat streams open with the assistant role (OpenAI sends it with empty content).
    pub fn role_chunk(&self) -> Option<Bytes> {
        (self.kind == Kind::Chat).then(|| {
            self.chat_chunk(
                Delta {
                    role: Some("assistant"),
                    content: Some(""),
                },
                None,
            )
        })
    }

    /// New text; for completions the finish reason rides on the same chunk.
    pub fn text_chunk(&self, text: &str, finish: Option<&'static str>) -> Bytes {
        match self.kind {
            Kind::Chat => self.chat_chunk(
                Delta {
                    role: None,
                    content: Some(text),
                },
                None,
            ),
            Kind::Completion => {
                let choices = [TextChoice {
                    index: 0,
                    text,
                    logprobs: None,
                    finish_reason: finish,
                }];
                sse::json_event(&TextChunk {
                    id: &self.id,
                    object: "text_completion",
                    created: self.created,
                    model: &self.model,
                    choices: &choices,
                    usage: None,
                })
            }
        }
    }

    /// Chat's separate closing chunk with an empty delta.
    pub fn finish_chunk(&self, finish: &'static str) -> Option<Bytes> {
        (self.kind == Kind::Chat).then(|| self.chat_chunk(Delta::default(), Some(finish)))
    }

    pub fn usage_chunk(&self, usage: &Usage) -> Bytes {
        match self.kind {
            Kind::Chat => sse::json_event(&ChatChunk {
                id: &self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: &self.model,
                choices: &[],
                usage: Some(usage),
            }),
            Kind::Completion => sse::json_event(&TextChunk {
                id: &self.id,
                object: "text_completion",
                created: self.created,
                model: &self.model,
                choices: &[],
                usage: Some(usage),
            }),
        }
    }

    fn chat_chunk(&self, delta: Delta<'_>, finish: Option<&'static str>) -> Bytes {
        let choices = [ChatChunkChoice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish,
        }];
        sse::json_event(&ChatChunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: &choices,
            usage: None,
        })
    }

    /// The whole answer as one JSON object.
    pub fn complete(&self, text: &str, finish: &'static str, usage: Usage) -> Vec<u8> {
        let out = match self.kind {
            Kind::Chat => serde_json::to_vec(&ChatCompletion {
                id: &self.id,
                object: "chat.completion",
                created: self.created,
                model: &self.model,
                choices: [ChatChoice {
                    index: 0,
                    message: AssistantMessage {
                        role: "assistant",
                        content: text,
                    },
                    logprobs: None,
                    finish_reason: finish,
                }],
                usage,
            }),
            Kind::Completion => serde_json::to_vec(&TextCompletion {
                id: &self.id,
                object: "text_completion",
                created: self.created,
                model: &self.model,
                choices: [TextChoice {
                    index: 0,
                    text,
                    logprobs: None,
                    finish_reason: Some(finish),
                }],
                usage,
            }),
        };
        out.unwrap_or_default()
    }
}

/// A failure after the stream started: an SSE event carrying the OpenAI error object. The
/// stream then ends without `[DONE]`, so no client mistakes it for a complete answer.
pub fn error_event(err: &GatewayError) -> Bytes {
    sse::json_event(&err.body())
}
