//! What the gateway does with a chat request's `tools`: read the answer for calls itself, or
//! leave the request to the worker's own route.

use crate::error::GatewayError;
use crate::protocol::openai::{ChatCompletionRequest, Tool, ToolChoice, ToolChoiceMode};
use crate::protocol::sampling::invalid;
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

/// Tools for a front door with no worker route to forward to (Messages, Responses): the tools
/// to render into the template and how to read the output, or a 400 for what cannot be served
/// on the token-id path (no parser; a choice that needs constrained decoding).
pub fn front_door_tools<'a>(
    tools: &'a [Tool],
    choice: Option<&ToolChoice>,
    parser: Option<tool_calls::ParserKind>,
    choice_param: &'static str,
) -> Result<(Option<&'a [Tool]>, Option<Reading>), GatewayError> {
    match choice {
        Some(ToolChoice::Mode(ToolChoiceMode::None)) => return Ok((None, None)),
        Some(ToolChoice::Mode(ToolChoiceMode::Required) | ToolChoice::Function(_)) => {
            return Err(invalid(
                choice_param,
                "a tool choice that forces a call needs constrained decoding, which this gateway \
                 does not do yet; use auto or none",
            )
            .into())
        }
        None | Some(ToolChoice::Mode(ToolChoiceMode::Auto)) => {}
    }
    if tools.is_empty() {
        return Ok((None, None));
    }
    let Some(kind) = parser else {
        return Err(invalid(
            "tools",
            "tools need the gateway to read tool calls: start it with --tool-call-parser",
        )
        .into());
    };
    let reading = Reading {
        kind,
        tool_names: tools.iter().map(|t| t.function.name.clone()).collect(),
    };
    Ok((Some(tools), Some(reading)))
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
