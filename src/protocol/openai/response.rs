//! What the gateway answers OpenAI clients: completions, stream chunks, model cards, errors.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: u32,
}

impl Usage {
    pub fn new(prompt_tokens: u32, completion_tokens: u32, cached_tokens: u32) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// `choices`: one `ChatChoice`, or several (a request with `n > 1`).
#[derive(Debug, Serialize)]
pub struct ChatCompletion<'a, C = [ChatChoice<'a>; 1]> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: C,
    pub usage: Usage,
}

#[derive(Debug, Serialize)]
pub struct ChatChoice<'a> {
    pub index: u32,
    pub message: AssistantMessage<'a>,
    pub logprobs: Option<serde_json::Value>,
    pub finish_reason: &'static str,
}

#[derive(Debug, Serialize)]
pub struct AssistantMessage<'a> {
    pub role: &'static str,
    /// Null when a reasoning parser left nothing for the answer (as SGLang).
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub tool_calls: &'a [ToolCallOut<'a>],
}

/// One call in an answer's `message.tool_calls`.
#[derive(Debug, Serialize)]
pub struct ToolCallOut<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut<'a>,
}

#[derive(Debug, Serialize)]
pub struct FunctionOut<'a> {
    pub name: &'a str,
    /// The arguments as a JSON text.
    pub arguments: &'a str,
}

/// `choices`: one `TextChoice`, or several (`n > 1`, a batch of prompts).
#[derive(Debug, Serialize)]
pub struct TextCompletion<'a, C = [TextChoice<'a>; 1]> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: C,
    pub usage: Usage,
}

#[derive(Debug, Serialize)]
pub struct TextChoice<'a> {
    pub index: u32,
    pub text: &'a str,
    pub logprobs: Option<serde_json::Value>,
    pub finish_reason: Option<&'static str>,
}

// === stream chunks ===

#[derive(Debug, Serialize)]
pub struct ChatChunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: &'a [ChatChunkChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<&'a Usage>,
}

#[derive(Debug, Serialize)]
pub struct ChatChunkChoice<'a> {
    pub index: u32,
    pub delta: Delta<'a>,
    pub logprobs: Option<serde_json::Value>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Default, Serialize)]
pub struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<&'a [ToolCallDelta<'a>]>,
}

/// A piece of a streamed call: the first carries its `id`, `type` and name, the next ones
/// pieces of its arguments; `index` says which call.
#[derive(Debug, Serialize)]
pub struct ToolCallDelta<'a> {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta<'a>,
}

#[derive(Debug, Serialize)]
pub struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    pub arguments: &'a str,
}

#[derive(Debug, Serialize)]
pub struct TextChunk<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: &'a [TextChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<&'a Usage>,
}

// === models and errors ===

#[derive(Debug, Serialize)]
pub struct ModelList<'a> {
    pub object: &'static str,
    pub data: Vec<ModelCard<'a>>,
}

#[derive(Debug, Serialize)]
pub struct ModelCard<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub root: &'a str,
    /// SGLang's cards carry it (always null for a base model).
    pub parent: Option<&'a str>,
    pub max_model_len: usize,
}

/// `{"error":{"message","type","param","code"}}`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}
