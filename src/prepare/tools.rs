//! What the gateway does with a chat request's `tools`: rendered into the prompt, the output
//! read for calls, and a forced choice's constraint on the generation, as SGLang's chat route.

use crate::error::GatewayError;
#[cfg(test)]
use crate::protocol::openai::ChatCompletionRequest;
use crate::protocol::openai::{
    FunctionCall, FunctionDef, Tool, ToolChoice, ToolChoiceMode, ToolKind,
};
use crate::protocol::sampling::invalid;
use crate::tokenize::python_json_dumps_ascii;
use crate::tool_calls::{self, Reading};
use serde_json::{json, Map, Value};

/// What the gateway does with a chat request's `tools`, as SGLang 0.5.9's chat route does.
pub enum NativeTools<'a> {
    /// None offered (or an empty list).
    None,
    /// Offered, `tool_choice` not `"none"`: `rendered` into the template (only the named one
    /// for a named choice), the output read for calls when the gateway has a parser, and the
    /// generation constrained as SGLang constrains it.
    Offered {
        rendered: &'a [Tool],
        reading: Option<Reading>,
        constraint: Option<Constraint>,
    },
    /// `tool_choice: "none"`: no tools in the prompt, the output is all content.
    Hidden,
}

/// A constraint on the generation, as an SGLang sampling parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constraint {
    /// `json_schema`: a forced choice's JSON list of calls.
    JsonSchema(String),
    /// `structural_tag`: `"auto"` with a strict tool, for a parser whose calls are JSON
    /// between tags.
    StructuralTag(String),
}

/// SGLang's `_validate_request` and `_process_messages`: a forced choice (`"required"`, a named
/// function) needs tools (and the named one among them) and is constrained to a JSON list of
/// calls (`get_json_schema_constraint`), with or without a parser; `"auto"` with a strict tool
/// and a parser that supports it gets a `structural_tag`. Calls are read only with a parser.
pub fn native_tools<'a>(
    offered: Option<&'a [Tool]>,
    choice: Option<&ToolChoice>,
    parser: Option<tool_calls::ParserKind>,
) -> Result<NativeTools<'a>, GatewayError> {
    let offered = offered.unwrap_or_default();
    let forced = match choice {
        Some(ToolChoice::Mode(ToolChoiceMode::None)) => return Ok(NativeTools::Hidden),
        None | Some(ToolChoice::Mode(ToolChoiceMode::Auto)) => None,
        Some(ToolChoice::Mode(ToolChoiceMode::Required)) => Some(None),
        Some(ToolChoice::Function(name)) => Some(Some(name.as_str())),
    };
    if let Some(forced) = forced {
        let bad = |m: String| GatewayError::from(invalid("tool_choice", m));
        if offered.is_empty() {
            return Err(bad(match forced {
                None => "Tools cannot be empty if tool choice is set to required.".into(),
                Some(_) => "Tools cannot be empty if tool choice is set to a specific tool.".into(),
            }));
        }
        let rendered = match forced {
            None => offered,
            Some(name) => match offered.iter().position(|t| t.function.name == name) {
                Some(i) => std::slice::from_ref(&offered[i]),
                None => return Err(bad(format!("Tool '{name}' not found in tools list."))),
            },
        };
        let allowed: Vec<&Tool> = rendered.iter().collect();
        let schema = calls_schema(&allowed, forced.is_some());
        return Ok(NativeTools::Offered {
            rendered,
            reading: parser.map(|_| reading(tool_calls::ParserKind::Forced, offered)),
            constraint: Some(Constraint::JsonSchema(python_json_dumps_ascii(&schema))),
        });
    }
    if offered.is_empty() {
        return Ok(NativeTools::None);
    }
    let strict = offered.iter().any(|t| t.function.strict == Some(true));
    Ok(NativeTools::Offered {
        rendered: offered,
        reading: parser.map(|kind| reading(kind, offered)),
        constraint: parser
            .filter(|_| strict)
            .and_then(|kind| structural_tag(kind, offered))
            .map(Constraint::StructuralTag),
    })
}

/// The deprecated `functions` and `function_call` as the `tools` and `tool_choice` they
/// became (SGLang's route ignores them; OpenAI still honours them): a 400 when sent with
/// their replacements.
pub fn legacy_functions(
    functions: Option<&[FunctionDef]>,
    function_call: Option<&FunctionCall>,
    has_tools: bool,
) -> Result<(Option<Vec<Tool>>, Option<ToolChoice>), GatewayError> {
    if has_tools && (functions.is_some() || function_call.is_some()) {
        return Err(invalid(
            "functions",
            "functions and function_call are the deprecated forms of tools and tool_choice: send one or the other",
        )
        .into());
    }
    let tools = functions.map(|fs| {
        fs.iter()
            .map(|f| Tool {
                kind: ToolKind::Function,
                function: f.clone(),
            })
            .collect()
    });
    let choice = function_call.map(|c| match c {
        FunctionCall::Mode(mode) => ToolChoice::Mode(*mode),
        FunctionCall::Function(name) => ToolChoice::Function(name.clone()),
    });
    Ok((tools, choice))
}

fn names(tools: &[Tool]) -> Vec<String> {
    tools.iter().map(|t| t.function.name.clone()).collect()
}

/// How `kind` reads calls to `tools`: their names, and their parameter schemas only for a
/// parser that types arguments by them (the others need no copy).
fn reading(kind: tool_calls::ParserKind, tools: &[Tool]) -> Reading {
    let parameters = match kind.reads_schemas() {
        true => tools
            .iter()
            .map(|t| t.function.parameters.clone())
            .collect(),
        false => Vec::new(),
    };
    Reading {
        kind,
        tool_names: names(tools),
        parameters,
    }
}

/// SGLang's `FunctionCallParser.get_structure_tag` for the parsers whose calls are JSON between
/// tags (the detector's `structure_info`): each tool's opening text (with its name), its
/// parameters' schema when the tool is strict (else any object), the closing text; triggered by
/// the opening tag. `None` for a parser SGLang gives no structural tag.
fn structural_tag(kind: tool_calls::ParserKind, tools: &[Tool]) -> Option<String> {
    let (begin, end, trigger) = match kind {
        tool_calls::ParserKind::Qwen25 => (
            "<tool_call>\n{\"name\":\"",
            "}\n</tool_call>",
            "<tool_call>",
        ),
        tool_calls::ParserKind::Hermes => {
            ("<tool_call>{\"name\":\"", "}</tool_call>", "<tool_call>")
        }
        _ => return None,
    };
    let structures: Vec<Value> = tools
        .iter()
        .map(|t| {
            let f = &t.function;
            let schema = match (&f.parameters, f.strict) {
                (Some(p), Some(true)) => Value::Object(p.clone()),
                _ => json!({}),
            };
            json!({"begin": format!("{begin}{}\", \"arguments\":", f.name),
                   "schema": schema, "end": end})
        })
        .collect();
    let tag = json!({"type": "structural_tag", "structures": structures, "triggers": [trigger]});
    Some(python_json_dumps_ascii(&tag))
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
            reading: Some(reading(kind, tools)),
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
            parameters: Vec::new(),
        }),
        json_schema: Some(python_json_dumps_ascii(&calls_schema(
            &allowed,
            forced.is_some(),
        ))),
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
            // Python's `parameters if parameters else …`: an empty schema is none.
            .filter(|p| !p.is_empty())
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

    fn request(extra: Value) -> ChatCompletionRequest {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        serde_json::from_value(body).expect("a request")
    }

    /// (rendered tool names, reading kind, constraint kind) or the error's param.
    fn decide(extra: Value, parser: Option<tool_calls::ParserKind>) -> String {
        let req = request(extra);
        match native_tools(req.tools.as_deref(), req.tool_choice.as_ref(), parser) {
            Ok(NativeTools::None) => "none".into(),
            Ok(NativeTools::Hidden) => "hidden".into(),
            Ok(NativeTools::Offered {
                rendered,
                reading,
                constraint,
            }) => format!(
                "{} {} {}",
                names(rendered).join(","),
                reading.map_or("-", |r| r.kind.name()),
                match constraint {
                    None => "-",
                    Some(Constraint::JsonSchema(_)) => "json_schema",
                    Some(Constraint::StructuralTag(_)) => "structural_tag",
                }
            ),
            Err(e) => format!("400 {}", e.body().error.param.unwrap_or_default()),
        }
    }

    #[test]
    fn every_choice_is_served_here_as_sglang_serves_it() {
        let qwen = Some(tool_calls::ParserKind::Qwen25);
        let tools = json!([{"type": "function", "function": {"name": "f"}},
                           {"type": "function", "function": {"name": "g"}}]);
        let with = |choice: Value| json!({"tools": tools, "tool_choice": choice});
        let named = |n: &str| json!({"type": "function", "function": {"name": n}});
        assert_eq!(decide(json!({}), qwen), "none");
        assert_eq!(decide(json!({"tools": tools}), None), "f,g - -");
        assert_eq!(decide(json!({"tools": tools}), qwen), "f,g qwen25 -");
        assert_eq!(decide(with(json!("auto")), qwen), "f,g qwen25 -");
        assert_eq!(decide(with(json!("none")), qwen), "hidden");
        assert_eq!(
            decide(with(json!("required")), qwen),
            "f,g forced json_schema"
        );
        assert_eq!(decide(with(json!("required")), None), "f,g - json_schema");
        assert_eq!(decide(with(named("g")), qwen), "g forced json_schema");
        assert_eq!(decide(with(named("h")), qwen), "400 tool_choice");
        let no_tools = json!({"tools": [], "tool_choice": "required"});
        assert_eq!(decide(no_tools, qwen), "400 tool_choice");
        assert_eq!(
            decide(json!({"tool_choice": named("f")}), qwen),
            "400 tool_choice"
        );
        assert_eq!(
            decide(json!({"tools": [], "tool_choice": "auto"}), qwen),
            "none"
        );
        let strict =
            json!({"tools": [{"type": "function", "function": {"name": "f", "strict": true}}]});
        assert_eq!(decide(strict.clone(), qwen), "f qwen25 structural_tag");
        assert_eq!(decide(strict, None), "f - -");
    }

    #[test]
    fn constraints_are_written_as_sglang_writes_them() {
        // Expected strings: SGLang 0.5.9's `get_json_schema_constraint` and `get_structure_tag`
        // through `convert_json_schema_to_str` (`json.dumps`), run on these tools.
        let tools = json!([{"type": "function", "function": {"name": "f", "strict": true,
            "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "é"}}}}},
            {"type": "function", "function": {"name": "g", "parameters": {}}}]);
        let req = request(json!({"tools": tools, "tool_choice": "required"}));
        let Ok(NativeTools::Offered {
            constraint: Some(Constraint::JsonSchema(s)),
            ..
        }) = native_tools(req.tools.as_deref(), req.tool_choice.as_ref(), None)
        else {
            panic!("a json_schema")
        };
        assert_eq!(
            s,
            r#"{"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [{"properties": {"name": {"type": "string", "enum": ["f"]}, "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "\u00e9"}}}}, "required": ["name", "parameters"]}, {"properties": {"name": {"type": "string", "enum": ["g"]}, "parameters": {"type": "object", "properties": {}}}, "required": ["name", "parameters"]}]}}"#
        );
        let req = request(json!({"tools": tools}));
        let Ok(NativeTools::Offered {
            constraint: Some(Constraint::StructuralTag(s)),
            ..
        }) = native_tools(
            req.tools.as_deref(),
            None,
            Some(tool_calls::ParserKind::Qwen25),
        )
        else {
            panic!("a structural_tag")
        };
        assert_eq!(
            s,
            r#"{"type": "structural_tag", "structures": [{"begin": "<tool_call>\n{\"name\":\"f\", \"arguments\":", "schema": {"type": "object", "properties": {"q": {"type": "string", "description": "\u00e9"}}}, "end": "}\n</tool_call>"}, {"begin": "<tool_call>\n{\"name\":\"g\", \"arguments\":", "schema": {}, "end": "}\n</tool_call>"}], "triggers": ["<tool_call>"]}"#
        );
    }
}
