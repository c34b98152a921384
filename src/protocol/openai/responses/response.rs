//! What the gateway answers Responses clients: the `response` object with its output items and
//! usage, and the stream's events (each with its `sequence_number`).

use serde::Serialize;
use serde_json::{Map, Value};

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    Reasoning {
        id: String,
        summary: [(); 0],
        content: Vec<ReasoningText>,
        status: &'static str,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: &'static str,
    },
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OutputText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    pub annotations: [(); 0],
    pub logprobs: [(); 0],
}

impl OutputText {
    pub fn new(text: String) -> OutputText {
        OutputText {
            kind: "output_text",
            text,
            annotations: [],
            logprobs: [],
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReasoningText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

impl ReasoningText {
    pub fn new(text: String) -> ReasoningText {
        ReasoningText {
            kind: "reasoning_text",
            text,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    pub input_tokens: u32,
    pub input_tokens_details: InputDetails,
    pub output_tokens: u32,
    pub output_tokens_details: OutputDetails,
    pub total_tokens: u32,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct InputDetails {
    pub cached_tokens: u32,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct OutputDetails {
    pub reasoning_tokens: u32,
}

impl Usage {
    pub fn new(input_tokens: u32, output_tokens: u32, cached_tokens: u32) -> Usage {
        Usage {
            input_tokens,
            input_tokens_details: InputDetails { cached_tokens },
            output_tokens,
            // Not counted apart: the reasoning is split from text, not from token ids.
            output_tokens_details: OutputDetails {
                reasoning_tokens: 0,
            },
            total_tokens: input_tokens.saturating_add(output_tokens),
        }
    }
}

/// The `response` object. `settings` echoes what the request asked for (instructions, tools,
/// sampling, …), as OpenAI's response does.
#[derive(Debug, Serialize)]
pub struct ResponseObject<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created_at: u64,
    pub status: &'static str,
    pub model: &'a str,
    pub output: &'a [OutputItem],
    pub usage: Option<Usage>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub error: Option<()>,
    pub previous_response_id: Option<()>,
    pub store: bool,
    pub background: bool,
    #[serde(flatten)]
    pub settings: &'a Map<String, Value>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct IncompleteDetails {
    pub reason: &'static str,
}

/// One stream event: `type`, `sequence_number` and the event's own fields.
#[derive(Debug, Serialize)]
pub struct Event<T: Serialize> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub sequence_number: u64,
    #[serde(flatten)]
    pub body: T,
}

#[derive(Debug, Serialize)]
pub struct ResponseEvent<'a> {
    pub response: ResponseObject<'a>,
}

#[derive(Debug, Serialize)]
pub struct ItemEvent<'a> {
    pub output_index: usize,
    pub item: &'a OutputItem,
}

#[derive(Debug, Serialize)]
pub struct PartEvent<'a, P: Serialize> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub content_index: usize,
    pub part: &'a P,
}

/// `response.output_text.delta` and `response.reasoning_text.delta`.
#[derive(Debug, Serialize)]
pub struct TextDelta<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub content_index: usize,
    pub delta: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<[(); 0]>,
}

/// `response.output_text.done` and `response.reasoning_text.done`.
#[derive(Debug, Serialize)]
pub struct TextDone<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub content_index: usize,
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<[(); 0]>,
}

#[derive(Debug, Serialize)]
pub struct ArgumentsDelta<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub delta: &'a str,
}

#[derive(Debug, Serialize)]
pub struct ArgumentsDone<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub name: &'a str,
    pub arguments: &'a str,
}

/// The `error` event of a stream that failed after it started.
#[derive(Debug, Serialize)]
pub struct ErrorEvent<'a> {
    pub code: Option<&'a str>,
    pub message: &'a str,
    pub param: Option<&'a str>,
}
