//! SGLang's native `/generate` API: the request we send and the chunks we read back
//! (both the 0.5.9 and 0.5.23 shapes; see docs on `meta_info` and `finish_reason`).

mod bootstrap;
mod client_request;
mod dp_rank;
mod token_ids;

pub use bootstrap::Bootstrap;
pub use client_request::ClientGenerateRequest;
pub use dp_rank::{DpRank, LegRanks, Pairing, RankField};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `sampling_params`: only fields we set are sent, because SGLang 0.5.23 rejects unknown ones.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SamplingParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_new_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        default,
        deserialize_with = "string_or_list"
    )]
    pub stop: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub stop_token_ids: Vec<u32>,
    /// Regex stop conditions (a string or a list), valid in 0.5.9 and 0.5.23.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_regex: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spaces_between_special_tokens: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_stop_trim: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_interval: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ebnf: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structural_tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_params: Option<Value>,
}

fn string_or_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s],
        Some(OneOrMany::Many(v)) => v,
    })
}

/// The body we POST to a worker's `/generate` (`to_json`).
#[derive(Debug, Serialize)]
pub struct GenerateRequest<'a> {
    /// Written by `to_json` ahead of the derived fields.
    #[serde(skip)]
    pub input_ids: &'a [u32],
    pub sampling_params: &'a SamplingParams,
    pub stream: bool,
    pub rid: &'a str,
    /// Log probabilities of the output tokens (`meta_info.output_token_logprobs`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub return_logprob: bool,
    /// With each, the most likely tokens at its place (`meta_info.output_top_logprobs`).
    #[serde(skip_serializing_if = "is_zero")]
    pub top_logprobs_num: u32,
    /// Prefill/decode disaggregation: where the decode worker finds the prompt's KV.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<&'a Bootstrap>,
    /// A data-parallel worker's rank the request runs on (the routing unit's), and on a PD
    /// leg the prefill rank that holds the KV.
    #[serde(flatten)]
    pub ranks: LegRanks,
}

impl GenerateRequest<'_> {
    /// The JSON body: `input_ids` first, by `token_ids` (thousands of them in a long prompt),
    /// then the derived fields.
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        // What `write_json` reserves for the ids (up to seven digits and a comma each), and room
        // for the other fields: the body is never grown (and copied) on the way.
        let mut body = Vec::with_capacity(512 + 8 * self.input_ids.len());
        body.extend_from_slice(b"{\"input_ids\":");
        token_ids::write_json(&mut body, self.input_ids);
        let rest = body.len();
        serde_json::to_writer(&mut body, self)?;
        // The derived fields come as an object of their own (never empty: `stream` and `rid`
        // are always there); its opening brace becomes the comma after the ids.
        if let Some(brace) = body.get_mut(rest) {
            *brace = b',';
        }
        Ok(body)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One `/generate` response object (a whole answer, or one SSE chunk). `text` and `output_ids`
/// are cumulative by default and deltas with `--incremental-streaming-output`; they are kept as
/// sent (JSON) because a cumulative value need only be read from where the last one ended.
#[derive(Debug, Deserialize)]
pub struct GenerateChunk<'a> {
    #[serde(borrow, default)]
    pub text: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    pub output_ids: Option<&'a serde_json::value::RawValue>,
    pub meta_info: MetaInfo,
}

#[derive(Debug, Default, Deserialize)]
pub struct MetaInfo {
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default)]
    pub completion_tokens: u32,
    #[serde(default)]
    pub cached_tokens: u32,
    /// `[logprob, id, text]` per output token: cumulative in SGLang's cumulative modes, new
    /// tokens only with incremental output.
    #[serde(default)]
    pub output_token_logprobs: Option<Vec<LogprobEntry>>,
    /// A list of such entries per output token (null where the engine had none).
    #[serde(default)]
    pub output_top_logprobs: Option<Vec<Option<Vec<LogprobEntry>>>>,
}

/// `[logprob, id, text]`: the text is not requested (the gateway decodes the id itself, the
/// same for every worker and every leg of a migrated stream).
#[derive(Debug, Clone, Deserialize)]
pub struct LogprobEntry(
    pub Option<f64>,
    pub u32,
    #[serde(default)] pub serde::de::IgnoredAny,
);

/// SGLang's finish reason: always an object, `null` while running.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase", from = "WireFinish")]
pub enum FinishReason {
    Stop {
        #[serde(default)]
        matched: Option<Value>,
    },
    Length {
        #[serde(default)]
        length: Option<u32>,
    },
    Abort {
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        status_code: Option<u16>,
        #[serde(default)]
        err_type: Option<String>,
    },
}

/// A finish reason as read: one struct with every variant's fields (a missing one is `None`),
/// so that it is read in one pass (an internally tagged enum buffers the object's fields before
/// it can pick the variant, an allocation per field on every finishing chunk).
#[derive(Deserialize)]
struct WireFinish {
    #[serde(rename = "type")]
    kind: FinishKind,
    matched: Option<Value>,
    length: Option<u32>,
    message: Option<String>,
    status_code: Option<u16>,
    err_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum FinishKind {
    Stop,
    Length,
    Abort,
}

impl From<WireFinish> for FinishReason {
    fn from(w: WireFinish) -> Self {
        match w.kind {
            FinishKind::Stop => FinishReason::Stop { matched: w.matched },
            FinishKind::Length => FinishReason::Length { length: w.length },
            FinishKind::Abort => FinishReason::Abort {
                message: w.message,
                status_code: w.status_code,
                err_type: w.err_type,
            },
        }
    }
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn openai(&self) -> &'static str {
        match self {
            FinishReason::Stop { .. } => "stop",
            FinishReason::Length { .. } => "length",
            FinishReason::Abort { .. } => "abort",
        }
    }
}

/// `{"error": "..."}` or `{"error": {"message": ...}}` or `{"object":"error","message":...}`:
/// SGLang uses all three; this pulls the message out of any of them.
pub fn error_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match v.get("error") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(o)) => o.get("message").and_then(Value::as_str).map(str::to_owned),
        _ => v.get("message").and_then(Value::as_str).map(str::to_owned),
    }
}

/// An SSE event a worker sent in place of a chunk: `{"error": {…}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorEvent {
    pub message: String,
    /// The HTTP status the worker meant.
    pub status: u16,
}

/// Reads an error event, with the status the worker meant. SGLang 0.5.23 puts it in
/// `error.code` (400 for a `ValueError` in a `/generate` stream, the abort's status in an OpenAI
/// stream); 0.5.9's `/generate` stream sends only `{"error": {"message": …}}`, and what it
/// catches there is a `ValueError` from validating the request: the client's input, so 400.
pub fn error_event(data: &[u8]) -> Option<ErrorEvent> {
    let v: Value = serde_json::from_slice(data).ok()?;
    let error = v.get("error")?;
    let message = match error {
        Value::String(s) => s.clone(),
        Value::Object(o) => o.get("message").and_then(Value::as_str)?.to_owned(),
        _ => return None,
    };
    let status = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    Some(ErrorEvent { message, status })
}

/// A `/generate` chunk that ends the request with an abort carrying an HTTP status (queue
/// full: 503, a scheduler-side validation error: 400), which SGLang streams after a 200.
pub fn status_abort(data: &[u8]) -> Option<ErrorEvent> {
    let chunk: GenerateChunk = serde_json::from_slice(data).ok()?;
    match chunk.meta_info.finish_reason? {
        FinishReason::Abort {
            message,
            status_code: Some(status),
            ..
        } if (400..600).contains(&status) => Some(ErrorEvent {
            message: message.unwrap_or_else(|| "aborted".into()),
            status,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
