//! OpenAI Responses requests (`POST /v1/responses`) as clients send them, every documented
//! field typed. Input items are read flat (every field optional) and checked per `type` in
//! `prepare::responses`, so an item a client echoes back from an earlier answer (with its
//! `id`, `status`, `annotations`) is read as it is.

use std::collections::HashMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponsesRequest {
    pub model: String,
    pub input: Input,
    pub instructions: Option<String>,
    pub tools: Option<Vec<ToolSpec>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub max_output_tokens: Option<i64>,
    pub max_tool_calls: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_logprobs: Option<u8>,
    pub text: Option<TextConfig>,
    pub reasoning: Option<ReasoningConfig>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<Map<String, Value>>,
    pub metadata: Option<HashMap<String, String>>,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub service_tier: Option<String>,
    pub include: Option<Vec<String>>,
    pub truncation: Option<String>,
    /// Server-side state this gateway does not keep: refused by name.
    pub previous_response_id: Option<String>,
    pub conversation: Option<Value>,
    pub store: Option<bool>,
    pub background: Option<bool>,
    pub prompt: Option<Value>,
}

impl ResponsesRequest {
    /// What the response object echoes of the request, as OpenAI's does (defaults filled in).
    pub fn settings(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("instructions".into(), to(&self.instructions));
        m.insert("max_output_tokens".into(), to(&self.max_output_tokens));
        m.insert(
            "parallel_tool_calls".into(),
            Value::Bool(self.parallel_tool_calls.unwrap_or(true)),
        );
        m.insert("temperature".into(), to(&self.temperature));
        m.insert("top_p".into(), to(&self.top_p));
        m.insert(
            "tool_choice".into(),
            self.tool_choice
                .clone()
                .unwrap_or_else(|| Value::from("auto")),
        );
        m.insert("tools".into(), to(&self.tools.clone().unwrap_or_default()));
        let text = self.text.clone().unwrap_or(TextConfig {
            format: None,
            verbosity: None,
        });
        let format = text.format.unwrap_or(TextFormat::Text);
        m.insert("text".into(), serde_json::json!({"format": to(&format)}));
        m.insert("reasoning".into(), to(&self.reasoning));
        m.insert(
            "metadata".into(),
            to(&self.metadata.clone().unwrap_or_default()),
        );
        m.insert("truncation".into(), Value::from("disabled"));
        m.insert("user".into(), to(&self.user));
        m
    }
}

/// A field as a JSON value (`null` if it cannot be one, which ours always can).
fn to<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// `input`: a string (one user message) or a list of items.
#[derive(Debug, Clone)]
pub enum Input {
    Text(String),
    Items(Vec<InputItem>),
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Input::Text(s)),
            v @ Value::Array(_) => serde_json::from_value(v)
                .map(Input::Items)
                .map_err(D::Error::custom),
            _ => Err(D::Error::custom(
                "expected a string or a list of input items",
            )),
        }
    }
}

/// One input item: a message (`type` `"message"` or absent), a `function_call`, a
/// `function_call_output`, or a `reasoning` item.
#[derive(Debug, Clone, Deserialize)]
pub struct InputItem {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub role: Option<String>,
    pub content: Option<MessageContent>,
    pub call_id: Option<String>,
    pub name: Option<String>,
    pub arguments: Option<String>,
    pub output: Option<MessageContent>,
    pub id: Option<String>,
    pub status: Option<String>,
    pub summary: Option<Vec<Value>>,
    pub encrypted_content: Option<String>,
}

/// A message's content: a string or parts (`input_text`, `output_text`, `refusal`, …).
#[derive(Debug, Clone)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(MessageContent::Text(s)),
            v @ Value::Array(_) => serde_json::from_value(v)
                .map(MessageContent::Parts)
                .map_err(D::Error::custom),
            _ => Err(D::Error::custom(
                "expected a string or a list of content parts",
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub refusal: Option<String>,
}

/// A tool: only `function` tools are served here; the hosted ones (`web_search`,
/// `file_search`, …) are refused by `prepare::responses`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ToolSpec {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub parameters: Option<Map<String, Value>>,
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TextConfig {
    pub format: Option<TextFormat>,
    pub verbosity: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Map<String, Value>,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        strict: Option<bool>,
    },
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningConfig {
    pub effort: Option<String>,
    pub summary: Option<String>,
    pub generate_summary: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ResponsesRequest, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn input_is_a_string_or_items() {
        let r = parse(json!({"model": "m", "input": "hi"})).unwrap();
        assert!(matches!(r.input, Input::Text(t) if t == "hi"));
        let r = parse(json!({"model": "m", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "1"}],
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}}))
        .unwrap();
        assert!(matches!(r.input, Input::Items(i) if i.len() == 3));
        for bad in [
            json!({"model": "m", "input": 1}),
            json!({"model": "m"}),
            json!({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}),
            json!({"model": "m", "input": "x", "max_output_tokens": "9"}),
            json!({"model": "m", "input": "x", "bogus": true}),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad} was accepted");
        }
    }
}
