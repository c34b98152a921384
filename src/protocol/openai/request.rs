//! OpenAI chat and completions requests as clients send them.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::prompt::Prompt;
use super::tools::{FunctionCall, FunctionDef, ResponseFormat, Tool, ToolChoice};

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
    /// SGLang's constraints on the output: a regular expression, an EBNF grammar.
    pub regex: Option<String>,
    pub ebnf: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<Value>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub max_completion_tokens: Option<i64>,
    /// Parsed from the same body by `server::body::parse_request` (a flattened struct would
    /// buffer the whole body and lose the field name in type errors).
    #[serde(skip)]
    pub sampling: Sampling,
    pub tools: Option<Vec<Tool>>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<ResponseFormat>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u8>,
    pub logit_bias: Option<HashMap<String, f64>>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub user: Option<String>,
    pub metadata: Option<HashMap<String, String>>,
    pub store: Option<bool>,
    pub service_tier: Option<String>,
    pub reasoning_effort: Option<String>,
    pub verbosity: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub safety_identifier: Option<String>,
    pub modalities: Option<Vec<String>>,
    pub audio: Option<Map<String, Value>>,
    pub prediction: Option<Map<String, Value>>,
    pub web_search_options: Option<Map<String, Value>>,
    /// The deprecated forms of `tools` and `tool_choice`.
    pub functions: Option<Vec<FunctionDef>>,
    pub function_call: Option<FunctionCall>,
    /// SGLang's extension: the reasoning apart from the content.
    pub separate_reasoning: Option<bool>,
    /// Top-level fields outside the OpenAI API, which the worker's own route may implement
    /// (SGLang's `regex`, `ebnf`, `lora_path`, …); set by `parse_request`.
    #[serde(skip)]
    pub extensions: Vec<String>,
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
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    /// Completions' `logprobs` is a count (0 to 5), not chat's flag.
    pub logprobs: Option<u8>,
    pub best_of: Option<u32>,
    pub logit_bias: Option<HashMap<String, f64>>,
    pub user: Option<String>,
    pub response_format: Option<ResponseFormat>,
    /// SGLang's completions extension: a JSON Schema (as a JSON text) the output follows.
    pub json_schema: Option<String>,
    #[serde(skip)]
    pub extensions: Vec<String>,
}

impl Sampling {
    /// The JSON keys this struct reads (the requests' own parse skips them).
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
        "regex",
        "ebnf",
    ];
}

/// A request body parsed into `T`, then its sampling fields and the names of the top-level
/// fields `T` does not know, each from the same bytes (see `server::body::parse_request`).
pub trait WithSampling: serde::de::DeserializeOwned {
    fn set_sampling(&mut self, sampling: Sampling, extensions: Vec<String>);
}

impl WithSampling for ChatCompletionRequest {
    fn set_sampling(&mut self, sampling: Sampling, extensions: Vec<String>) {
        self.sampling = sampling;
        self.extensions = extensions;
    }
}

impl WithSampling for CompletionRequest {
    fn set_sampling(&mut self, sampling: Sampling, extensions: Vec<String>) {
        self.sampling = sampling;
        self.extensions = extensions;
    }
}
