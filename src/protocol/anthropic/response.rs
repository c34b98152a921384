//! What the gateway answers Anthropic clients: the `message` object, the stream's events, and
//! errors, as Anthropic documents them.

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    /// Prompt tokens the worker did not have cached (Anthropic counts cache reads apart).
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub cache_read_input_tokens: u32,
    pub cache_creation_input_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, output_tokens: u32, cached_tokens: u32) -> Usage {
        Usage {
            input_tokens: prompt_tokens.saturating_sub(cached_tokens),
            output_tokens,
            cache_read_input_tokens: cached_tokens,
            cache_creation_input_tokens: 0,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Message<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: &'a str,
    pub content: &'a [ContentBlock],
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<&'a str>,
    pub usage: Usage,
}

/// A block of the answer. In a stream's `content_block_start` it is empty, its content
/// following in deltas.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Thinking {
        thinking: String,
        /// Anthropic signs its thinking for the next turn; nothing here checks it.
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// The stream's events, each sent as `event: <type>` + `data: <json>`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent<'a> {
    MessageStart {
        message: Message<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: &'a ContentBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDelta<'a>,
        usage: Usage,
    },
    MessageStop,
    Ping,
}

impl StreamEvent<'_> {
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
            StreamEvent::Ping => "ping",
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta<'a> {
    TextDelta { text: &'a str },
    ThinkingDelta { thinking: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Debug, Serialize)]
pub struct MessageDelta<'a> {
    pub stop_reason: &'static str,
    pub stop_sequence: Option<&'a str>,
}

/// `{"type":"error","error":{"type","message"}}`
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: &'a str,
}

/// Anthropic's error `type` and status for a gateway status: its own codes where it has one
/// (an overloaded service is its 529).
pub fn error_kind(status: u16) -> (u16, &'static str) {
    match status {
        401 => (401, "authentication_error"),
        403 => (403, "permission_error"),
        404 => (404, "not_found_error"),
        413 => (413, "request_too_large"),
        429 => (429, "rate_limit_error"),
        503 => (529, "overloaded_error"),
        504 => (504, "timeout_error"),
        s if s >= 500 => (s, "api_error"),
        s => (s, "invalid_request_error"),
    }
}

impl<'a> ErrorBody<'a> {
    pub fn new(kind: &'static str, message: &'a str) -> ErrorBody<'a> {
        ErrorBody {
            kind: "error",
            error: ErrorDetail { kind, message },
        }
    }
}
