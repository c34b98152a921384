//! Anthropic Messages requests as clients send them: every documented field typed, so a wrong
//! type is a 400 naming it; fields of the API this gateway cannot serve are refused by name
//! rather than dropped.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesRequest {
    pub model: String,
    pub messages: Vec<InputMessage>,
    /// Required, as Anthropic requires it.
    pub max_tokens: i64,
    pub system: Option<System>,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub tools: Option<Vec<ToolDef>>,
    pub tool_choice: Option<ToolChoice>,
    pub thinking: Option<Thinking>,
    pub metadata: Option<Metadata>,
    /// Accepted and ignored: there is one tier here.
    pub service_tier: Option<String>,
    /// Anthropic-hosted features: refused by name (see `prepare::messages`).
    pub container: Option<Value>,
    pub mcp_servers: Option<Value>,
    pub context_management: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputMessage {
    pub role: Role,
    pub content: Content,
}

/// A message's content: a string, or a list of blocks.
#[derive(Debug, Clone)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Content::Text(s)),
            v @ Value::Array(_) => serde_json::from_value(v)
                .map(Content::Blocks)
                .map_err(D::Error::custom),
            _ => Err(D::Error::custom(
                "expected a string or a list of content blocks",
            )),
        }
    }
}

/// The content blocks a request may carry. Images and documents are refused (text-only
/// gateway), as the chat route refuses image parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<Value>,
        #[serde(default)]
        citations: Option<Value>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
        #[serde(default)]
        cache_control: Option<Value>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<ToolResultContent>,
        #[serde(default)]
        is_error: Option<bool>,
        #[serde(default)]
        cache_control: Option<Value>,
    },
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
}

/// A tool result: a string or text blocks.
#[derive(Debug, Clone)]
pub struct ToolResultContent(pub String);

impl<'de> Deserialize<'de> for ToolResultContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum ResultBlock {
            // Other keys (`cache_control`) change nothing here.
            Text { text: String },
        }
        match Value::deserialize(d)? {
            Value::String(s) => Ok(ToolResultContent(s)),
            v @ Value::Array(_) => {
                let blocks: Vec<ResultBlock> = serde_json::from_value(v).map_err(|e| {
                    D::Error::custom(format!("tool_result content blocks must be text: {e}"))
                })?;
                let texts: Vec<String> = blocks
                    .into_iter()
                    .map(|ResultBlock::Text { text, .. }| text)
                    .collect();
                Ok(ToolResultContent(texts.join("\n")))
            }
            _ => Err(D::Error::custom(
                "expected a string or a list of text blocks",
            )),
        }
    }
}

/// `system`: a string or text blocks.
#[derive(Debug, Clone)]
pub struct System(pub String);

impl<'de> Deserialize<'de> for System {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum SystemBlock {
            // Other keys (`cache_control`, `citations`) change nothing here.
            Text { text: String },
        }
        match Value::deserialize(d)? {
            Value::String(s) => Ok(System(s)),
            v @ Value::Array(_) => {
                let blocks: Vec<SystemBlock> = serde_json::from_value(v).map_err(|e| {
                    D::Error::custom(format!("system blocks must be text blocks: {e}"))
                })?;
                let texts: Vec<String> = blocks
                    .into_iter()
                    .map(|SystemBlock::Text { text, .. }| text)
                    .collect();
                Ok(System(texts.join("\n")))
            }
            _ => Err(D::Error::custom(
                "expected a string or a list of text blocks",
            )),
        }
    }
}

/// A client tool (`type` absent or `"custom"`); Anthropic's server tools (`web_search_…`,
/// `bash_…`, …) run on Anthropic's side and are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Option<Map<String, Value>>,
    pub cache_control: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    Auto {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: String,
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Thinking {
    Enabled { budget_tokens: i64 },
    Disabled,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub user_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<MessagesRequest, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn every_content_shape_is_read() {
        let r = parse(
            json!({"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "a"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "42"}]}]}],
            "tool_choice": {"type": "tool", "name": "f"}, "thinking": {"type": "disabled"}}),
        )
        .unwrap();
        assert_eq!(r.system.unwrap().0, "be brief");
        assert_eq!(r.messages.len(), 3);
        assert_eq!(
            r.tool_choice,
            Some(ToolChoice::Tool {
                name: "f".into(),
                disable_parallel_tool_use: None
            })
        );
    }

    #[test]
    fn missing_or_mistyped_fields_are_refused() {
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let e = parse(json!({"model": "m", "messages": msgs})).unwrap_err();
        assert!(e.contains("max_tokens"), "{e}");
        for bad in [
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 3}]}),
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
                "content": [{"type": "image", "source": {}}]}]}),
            json!({"model": "m", "max_tokens": "5", "messages": msgs}),
            json!({"model": "m", "max_tokens": 5, "messages": msgs, "frobnicate": 1}),
            json!({"model": "m", "max_tokens": 5, "messages": msgs, "system": 1}),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad} was accepted");
        }
    }
}
