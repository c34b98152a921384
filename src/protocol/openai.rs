//! OpenAI chat and completions: requests as clients send them, responses and stream chunks as we emit them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `stop` may be one string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopSpec {
    One(String),
    Many(Vec<String>),
}

impl StopSpec {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSpec::One(s) => vec![s],
            StopSpec::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
    #[serde(default)]
    pub continuous_usage_stats: bool,
}

/// Sampling fields shared by chat and completions, mapped onto SGLang's `sampling_params`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<StopSpec>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub ignore_eos: Option<bool>,
    pub min_tokens: Option<i64>,
    pub skip_special_tokens: Option<bool>,
    pub no_stop_trim: Option<bool>,
    pub n: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<Value>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub max_completion_tokens: Option<i64>,
    /// Parsed from the same body by `server::body::parse_request` (a flattened struct would lose
    /// the field name in type errors).
    #[serde(skip)]
    pub sampling: Sampling,
    pub tools: Option<Value>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub user: Option<String>,
    /// Everything else the client sent. Non-empty means the worker's own OpenAI route must see it.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    Texts(Vec<String>),
    IdBatches(Vec<Vec<u32>>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    #[serde(skip)]
    pub sampling: Sampling,
    pub user: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Sampling {
    /// The JSON keys this struct reads (they also land in the requests' `other` map).
    pub const FIELDS: &'static [&'static str] = &[
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
        "stop",
        "stop_token_ids",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "no_stop_trim",
        "n",
    ];
}

/// A request body parsed into `T` plus its sampling fields, each with field-accurate errors.
pub trait WithSampling: serde::de::DeserializeOwned {
    fn set_sampling(&mut self, sampling: Sampling);
}

impl WithSampling for ChatCompletionRequest {
    fn set_sampling(&mut self, sampling: Sampling) {
        self.sampling = sampling;
    }
}

impl WithSampling for CompletionRequest {
    fn set_sampling(&mut self, sampling: Sampling) {
        self.sampling = sampling;
    }
}

/// Fields a client may send that we accept and ignore because they do not change the generation.
pub const HARMLESS_FIELDS: &[&str] = &[
    "best_of",
    "rid",
    "separate_reasoning",
    "return_cached_tokens_details",
    "metadata",
    "store",
    "parallel_tool_calls",
];

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

// === non-stream responses ===

#[derive(Debug, Serialize)]
pub struct ChatCompletion<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [ChatChoice<'a>; 1],
    pub usage: Usage,
}

#[derive(Debug, Serialize)]
pub struct ChatChoice<'a> {
    pub index: u32,
    pub message: AssistantMessage<'a>,
    pub logprobs: Option<()>,
    pub finish_reason: &'static str,
}

#[derive(Debug, Serialize)]
pub struct AssistantMessage<'a> {
    pub role: &'static str,
    pub content: &'a str,
}

#[derive(Debug, Serialize)]
pub struct TextCompletion<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [TextChoice<'a>; 1],
    pub usage: Usage,
}

#[derive(Debug, Serialize)]
pub struct TextChoice<'a> {
    pub index: u32,
    pub text: &'a str,
    pub logprobs: Option<()>,
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
    pub logprobs: Option<()>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Debug, Default, Serialize)]
pub struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
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
    pub data: [ModelCard<'a>; 1],
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
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}
