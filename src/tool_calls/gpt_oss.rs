//! SGLang 0.5.9's `gpt-oss` (`GptOssDetector`): Harmony tool calls,
//! `<|start|>assistant<|channel|>commentary to=functions.name <|constrain|>json<|message|>{…}<|call|>`,
//! read with the Harmony reader the `gpt-oss` reasoning parser uses. A call is seen only after
//! `<|start|>assistant`; a call needs `<|constrain|>json`, a function of the request and JSON
//! arguments, else it is dropped. The content is the text of the other content events, joined by
//! spaces and stripped; the analysis channel is dropped.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::{Parsed, Start, ToolCall};
use crate::reasoning::harmony::{events, EventKind};
use crate::reasoning::python_strip;
use crate::tokenize::python_json_dumps;

const CALL_BEGIN: &str = "<|start|>assistant<|channel|>commentary";

/// SGLang's `tool_extract_pattern`.
static CALL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?s)to=([a-zA-Z_][a-zA-Z0-9_.-]*)\s*<\|constrain\|>json<\|message\|>(.*?)(?:<\|call\|>|$)",
    )
    .ok()
});

pub fn has_call(text: &str) -> bool {
    text.contains(CALL_BEGIN)
}

/// Anything from the first marker on may be Harmony structure: only the text before it is sure
/// to be content as it is.
pub fn start(text: &str) -> Start {
    Start::first_of(text, &["<|"])
}

pub fn parse(text: &str, tool_names: &[String]) -> Option<Parsed> {
    let pattern = CALL.as_ref()?;
    let mut calls = Vec::new();
    let mut content = Vec::new();
    for e in events(text, false) {
        match e.kind {
            EventKind::ToolCall => calls.extend(call(pattern, &e.text, tool_names)),
            EventKind::Normal => content.push(e.text),
            EventKind::Reasoning => {}
        }
    }
    Some(Parsed {
        content: python_strip(&content.join(" ")).to_owned(),
        calls,
    })
}

fn call(pattern: &Regex, block: &str, tool_names: &[String]) -> Option<ToolCall> {
    let found = pattern.captures(block)?;
    let full = found.get(1)?.as_str();
    let name = full.rsplit('.').next().unwrap_or(full);
    if !tool_names.iter().any(|n| n == name) {
        return None;
    }
    let json = found.get(2)?.as_str();
    let arguments = if python_strip(json).is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(json).ok()?
    };
    Some(ToolCall {
        name: name.to_owned(),
        arguments: python_json_dumps(&arguments),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_calls_after_the_analysis() {
        let text = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>";
        let p = parse(text, &["f".to_owned()]).unwrap_or_default();
        assert_eq!(p.content, "");
        assert_eq!(
            p.calls,
            [ToolCall {
                name: "f".into(),
                arguments: "{\"a\": 1}".into()
            }]
        );
        assert!(parse(text, &["g".to_owned()]).is_some_and(|p| p.calls.is_empty()));
    }
}
