//! The OpenAI objects the simulator sends, in SGLang's shapes rather than the gateway's
//! (`protocol::openai`): SGLang adds `matched_stop`, `reasoning_content`, `reasoning_tokens`
//! and writes `null` where the gateway leaves a field out. Field order is SGLang's.

use serde::Serialize;
use serde_json::Value;

/// A completion object or one stream chunk.
#[derive(Debug, Serialize)]
pub struct Envelope<'a, C> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<C>,
    /// Outer `None`: no `usage` key (chat chunks); `Some(None)`: `"usage":null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// `finish_reason` and `matched_stop`, both `null` while the run goes on.
#[derive(Debug, Default, Serialize)]
pub struct Finish {
    pub finish_reason: Option<&'static str>,
    pub matched_stop: Option<Value>,
}

impl Finish {
    /// The last chunk of a stream an abort cut short.
    pub fn abort() -> Finish {
        Finish {
            finish_reason: Some("abort"),
            matched_stop: None,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ChatChoice<'a> {
    pub index: u32,
    pub message: Message<'a>,
    pub logprobs: Option<Value>,
    #[serde(flatten)]
    pub finish: Finish,
}

#[derive(Debug, Serialize)]
pub struct Message<'a> {
    pub role: &'static str,
    pub content: &'a str,
    pub reasoning_content: Option<()>,
    pub tool_calls: Option<()>,
}

#[derive(Debug, Serialize)]
pub struct ChunkChoice<'a> {
    pub index: u32,
    pub delta: Delta<'a>,
    pub logprobs: Option<Value>,
    #[serde(flatten)]
    pub finish: Finish,
}

#[derive(Debug, Default, Serialize)]
pub struct Delta<'a> {
    pub reasoning_content: Option<()>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
}

#[derive(Debug, Serialize)]
pub struct TextChoice<'a> {
    pub index: u32,
    pub text: &'a str,
    pub logprobs: Option<Value>,
    #[serde(flatten)]
    pub finish: Finish,
}

#[derive(Debug, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
    pub completion_tokens: usize,
    /// Only with `--enable-cache-report`.
    pub prompt_tokens_details: Option<CachedTokens>,
    pub reasoning_tokens: usize,
    pub completion_tokens_details: Option<()>,
}

#[derive(Debug, Serialize)]
pub struct CachedTokens {
    pub cached_tokens: usize,
}

/// SGLang's OpenAI error object.
#[derive(Debug, Serialize)]
pub struct ErrorObject<'a> {
    object: &'static str,
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<()>,
    code: u16,
}

impl<'a> ErrorObject<'a> {
    pub fn new(message: &'a str, kind: &'a str, code: u16) -> ErrorObject<'a> {
        ErrorObject {
            object: "error",
            message,
            kind,
            param: None,
            code,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &impl Serialize) -> String {
        serde_json::to_string(v).unwrap_or_default()
    }

    #[test]
    fn chunks_keep_sglang_field_order_and_nulls() {
        let chunk = Envelope {
            id: "r",
            object: "chat.completion.chunk",
            created: 1,
            model: "m",
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta {
                    role: Some("assistant"),
                    content: Some(""),
                    ..Delta::default()
                },
                logprobs: None,
                finish: Finish::default(),
            }],
            usage: None,
        };
        assert_eq!(
            text(&chunk),
            r#"{"id":"r","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}"#
        );
        let usage = Usage {
            prompt_tokens: 3,
            total_tokens: 5,
            completion_tokens: 2,
            prompt_tokens_details: Some(CachedTokens { cached_tokens: 1 }),
            reasoning_tokens: 0,
            completion_tokens_details: None,
        };
        let last: Envelope<'_, TextChoice<'_>> = Envelope {
            id: "r",
            object: "text_completion",
            created: 1,
            model: "m",
            choices: vec![],
            usage: Some(Some(usage)),
        };
        assert_eq!(
            text(&last),
            r#"{"id":"r","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1},"reasoning_tokens":0,"completion_tokens_details":null}}"#
        );
        assert_eq!(
            text(&ErrorObject::new("no", "BadRequestError", 400)),
            r#"{"object":"error","message":"no","type":"BadRequestError","param":null,"code":400}"#
        );
    }
}
