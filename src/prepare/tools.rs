//! What the gateway does with a chat request's `tools`: read the answer for calls itself, or
//! leave the request to the worker's own route.

use crate::protocol::openai::{ChatCompletionRequest, ToolChoice, ToolChoiceMode};
use crate::tool_calls::{self, Reading};

/// What the gateway itself does with a request's `tools`.
pub enum NativeTools {
    /// None offered (or an empty list).
    None,
    /// Offered, and read from the output with the configured parser.
    Read(Reading),
    /// `tool_choice: "none"` with a parser: no tools in the prompt, the output is all content.
    Hidden,
    /// No parser, or a choice that needs constrained decoding (`"required"`, a named
    /// function): the worker's own route answers.
    Forward,
}

/// SGLang's chat server reads the output for calls when the request has tools, `tool_choice`
/// is not `"none"`, and the server has a parser; `"required"` and a named function constrain
/// the generation, which is not done here yet.
pub fn native_tools(
    req: &ChatCompletionRequest,
    parser: Option<tool_calls::ParserKind>,
) -> NativeTools {
    let offered = req.tools.as_deref().unwrap_or_default();
    let Some(kind) = parser else {
        return if req.tools.is_none() && req.tool_choice.is_none() {
            NativeTools::None
        } else {
            NativeTools::Forward
        };
    };
    let constrained = matches!(
        req.tool_choice,
        Some(ToolChoice::Mode(ToolChoiceMode::Required) | ToolChoice::Function(_))
    );
    if offered.is_empty() && !constrained {
        return NativeTools::None;
    }
    match &req.tool_choice {
        None | Some(ToolChoice::Mode(ToolChoiceMode::Auto)) => NativeTools::Read(Reading {
            kind,
            tool_names: offered.iter().map(|t| t.function.name.clone()).collect(),
        }),
        Some(ToolChoice::Mode(ToolChoiceMode::None)) => NativeTools::Hidden,
        Some(ToolChoice::Mode(ToolChoiceMode::Required) | ToolChoice::Function(_)) => {
            NativeTools::Forward
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decide(extra: serde_json::Value, parser: Option<tool_calls::ParserKind>) -> &'static str {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let req: ChatCompletionRequest = serde_json::from_value(body).expect("a request");
        match native_tools(&req, parser) {
            NativeTools::None => "none",
            NativeTools::Read(_) => "read",
            NativeTools::Hidden => "hidden",
            NativeTools::Forward => "forward",
        }
    }

    #[test]
    fn tools_are_read_here_only_with_a_parser_and_an_unconstrained_choice() {
        let qwen = Some(tool_calls::ParserKind::Qwen25);
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let with = |choice: serde_json::Value| json!({"tools": tools, "tool_choice": choice});
        assert_eq!(decide(json!({}), qwen), "none");
        assert_eq!(decide(json!({}), None), "none");
        assert_eq!(decide(json!({"tools": tools}), None), "forward");
        assert_eq!(decide(json!({"tools": tools}), qwen), "read");
        assert_eq!(decide(with(json!("auto")), qwen), "read");
        assert_eq!(decide(with(json!("none")), qwen), "hidden");
        assert_eq!(decide(with(json!("required")), qwen), "forward");
        let named = json!({"type": "function", "function": {"name": "f"}});
        assert_eq!(decide(with(named), qwen), "forward");
        assert_eq!(
            decide(json!({"tools": [], "tool_choice": "auto"}), qwen),
            "none"
        );
        assert_eq!(decide(json!({"tool_choice": "auto"}), None), "forward");
    }
}
