//! SGLang 0.5.9's `kimi_k2` (`KimiK2Detector`): calls inside `<|tool_calls_section_begin|>`,
//! each `<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{…}<|tool_call_end|>`.
//! The arguments are passed on as the model wrote them (not re-read as JSON), and the name is
//! not checked against the tools, as SGLang does; the content is the text before the section.

use std::sync::LazyLock;

use regex::Regex;

use super::{Parsed, Start, ToolCall};

const SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";

/// SGLang's `tool_call_regex` and `tool_call_id_regex`.
static CALL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?s)<\|tool_call_begin\|>\s*(?P<tool_call_id>[\w\.]+:\d+)\s*<\|tool_call_argument_begin\|>\s*(?P<function_arguments>\{.*?\})\s*<\|tool_call_end\|>",
    )
    .ok()
});
static CALL_ID: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(?:functions\.)?(?P<name>[\w\.]+):(?P<index>\d+)$").ok());

pub fn has_call(text: &str) -> bool {
    text.contains(SECTION_BEGIN)
}

pub fn start(text: &str) -> Start {
    Start::first_of(text, &[SECTION_BEGIN])
}

pub fn parse(text: &str) -> Option<Parsed> {
    let at = text.find(SECTION_BEGIN)?;
    let (call, call_id) = (CALL.as_ref()?, CALL_ID.as_ref()?);
    let calls = call
        .captures_iter(text)
        .filter_map(|c| {
            // An id of another shape is skipped (SGLang logs it).
            let id = call_id.captures(c.name("tool_call_id")?.as_str())?;
            Some(ToolCall {
                name: id.name("name")?.as_str().to_owned(),
                arguments: c.name("function_arguments")?.as_str().to_owned(),
            })
        })
        .collect();
    Some(Parsed {
        content: text[..at].to_owned(),
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_calls_by_their_ids() {
        let text = "Hi <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":1}<|tool_call_end|><|tool_call_begin|>g:1 <|tool_call_argument_begin|> {}<|tool_call_end|><|tool_calls_section_end|>";
        let p = parse(text).unwrap_or_default();
        assert_eq!(p.content, "Hi ");
        let calls: Vec<(&str, &str)> = p
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("f", "{\"a\":1}"), ("g", "{}")]);
    }
}
