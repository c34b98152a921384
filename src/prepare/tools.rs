//! What the gateway does with a chat request's `tools`: read the answer for calls itself, or
//! leave the request to the worker's own route.

use crate::error::GatewayError;
use crate::protocol::openai::{ChatCompletionRequest, Tool, ToolChoice, ToolChoiceMode};
use crate::protocol::sampling::invalid;
use crate::tool_calls::{self, Reading};
use serde_json::{json, Map, Value};

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

/// What a front door with no worker route to forward to (Messages, Responses) does with its
/// tools: the tools rendered into the template, how the output is read, and the constraint a
/// forced choice puts on the generation (as SGLang's chat route does it).
pub struct FrontDoorTools<'a> {
    pub rendered: Option<&'a [Tool]>,
    pub reading: Option<Reading>,
    /// SGLang's `json_schema` sampling parameter: a JSON list of calls.
    pub json_schema: Option<String>,
}

/// `auto` reads the output with the configured parser (a 400 without one); `none` leaves the
/// tools out; a forced choice (`required`, a named function) constrains the output to a JSON
/// list of calls of the offered (or the named) tools, which needs no parser.
pub fn front_door_tools<'a>(
    tools: &'a [Tool],
    choice: Option<&ToolChoice>,
    parser: Option<tool_calls::ParserKind>,
    choice_param: &'static str,
) -> Result<FrontDoorTools<'a>, GatewayError> {
    let none = FrontDoorTools {
        rendered: None,
        reading: None,
        json_schema: None,
    };
    let forced = match choice {
        Some(ToolChoice::Mode(ToolChoiceMode::None)) => return Ok(none),
        None | Some(ToolChoice::Mode(ToolChoiceMode::Auto)) => None,
        Some(ToolChoice::Mode(ToolChoiceMode::Required)) => Some(None),
        Some(ToolChoice::Function(name)) => Some(Some(name.as_str())),
    };
    let Some(forced) = forced else {
        if tools.is_empty() {
            return Ok(none);
        }
        let Some(kind) = parser else {
            return Err(invalid(
                "tools",
                "tools need the gateway to read tool calls: start it with --tool-call-parser",
            )
            .into());
        };
        return Ok(FrontDoorTools {
            rendered: Some(tools),
            reading: Some(Reading {
                kind,
                tool_names: tools.iter().map(|t| t.function.name.clone()).collect(),
            }),
            json_schema: None,
        });
    };
    let allowed: Vec<&Tool> = tools
        .iter()
        .filter(|t| forced.is_none_or(|name| t.function.name == name))
        .collect();
    if allowed.is_empty() {
        return Err(invalid(
            choice_param,
            match forced {
                Some(name) => format!("tool_choice names `{name}`, which is not in tools"),
                None => "a tool choice that forces a call needs tools".to_owned(),
            },
        )
        .into());
    }
    Ok(FrontDoorTools {
        rendered: Some(tools),
        reading: Some(Reading {
            kind: tool_calls::ParserKind::Forced,
            tool_names: allowed.iter().map(|t| t.function.name.clone()).collect(),
        }),
        json_schema: Some(calls_schema(&allowed, forced.is_some()).to_string()),
    })
}

/// SGLang's `get_json_schema_constraint`: a list of `{"name", "parameters"}` objects of the
/// allowed tools (exactly one for a named function), their `$defs` gathered at the top.
fn calls_schema(tools: &[&Tool], one: bool) -> Value {
    let item = |t: &Tool| {
        let params = t
            .function
            .parameters
            .clone()
            .map(Value::Object)
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        json!({"properties": {"name": {"type": "string", "enum": [t.function.name]},
                              "parameters": params},
               "required": ["name", "parameters"]})
    };
    if one {
        let items = tools.first().map(|t| item(t)).unwrap_or_default();
        return json!({"type": "array", "minItems": 1, "maxItems": 1, "items": items});
    }
    let mut schema = json!({"type": "array", "minItems": 1,
        "items": {"type": "object", "anyOf": tools.iter().map(|t| item(t)).collect::<Vec<_>>()}});
    let mut defs = Map::new();
    for t in tools {
        if let Some(Value::Object(d)) = t.function.parameters.as_ref().and_then(|p| p.get("$defs"))
        {
            defs.extend(d.clone());
        }
    }
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs);
    }
    schema
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
