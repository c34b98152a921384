//! An OpenAI Responses request as the chat it is: `instructions` a system message, input items
//! chat messages (a `function_call` an assistant's `tool_calls`, its output a `tool` message),
//! function tools as chat's, `text.format` SGLang's `json_schema`; then prepared as chat is.
//! Stateless: whatever needs a stored response or conversation is a 400 naming the field.

use serde_json::{json, Map, Value};

use super::{chat_like, check_model, front_door_tools, ChatLike, Prepared};
use crate::error::GatewayError;
use crate::model::Model;
use crate::protocol::openai::responses::{
    ContentPart, Input, InputItem, MessageContent, ResponsesRequest, TextFormat,
};
use crate::protocol::openai::{FunctionDef, Sampling, Tool, ToolChoice, ToolChoiceMode, ToolKind};
use crate::protocol::sampling::invalid;

const ROLES: &[&str] = &["user", "system", "developer", "assistant"];

pub fn prepare(model: &Model, req: &ResponsesRequest) -> Result<Prepared, GatewayError> {
    check_model(model, &req.model)?;
    refuse_state(req)?;
    let tools = tools(req)?;
    let choice = tool_choice(req.tool_choice.as_ref())?;
    let front = front_door_tools(
        &tools,
        choice.as_ref(),
        model.tool_call_parser,
        "tool_choice",
    )?;
    let messages = chat_messages(req)?;
    if messages.is_empty() {
        return Err(invalid("input", "input must not be empty").into());
    }
    let kwargs = req
        .reasoning
        .as_ref()
        .and_then(|r| r.effort.as_ref())
        .map(|effort| {
            let mut k = Map::new();
            k.insert("reasoning_effort".into(), Value::from(effort.as_str()));
            k
        });
    let sampling = Sampling {
        temperature: req.temperature,
        top_p: req.top_p,
        ..Sampling::default()
    };
    let mut prepared = chat_like(
        model,
        ChatLike {
            messages: &messages,
            tools: front.rendered,
            reading: front.reading,
            template_kwargs: kwargs.as_ref(),
            sampling: &sampling,
            max: req.max_output_tokens,
            max_param: "max_output_tokens",
            stream: req.stream,
            user: [&req.prompt_cache_key, &req.user, &req.safety_identifier]
                .into_iter()
                .find_map(Clone::clone),
        },
    )?;
    let format = match req.text.as_ref().and_then(|t| t.format.as_ref()) {
        None | Some(TextFormat::Text) => None,
        // As SGLang's chat route maps `json_object`.
        Some(TextFormat::JsonObject) => Some(r#"{"type": "object"}"#.to_owned()),
        Some(TextFormat::JsonSchema { schema, .. }) => {
            Some(Value::Object(schema.clone()).to_string())
        }
    };
    prepared.params.json_schema =
        match (format, front.json_schema) {
            (Some(_), Some(_)) => return Err(invalid(
                "text.format",
                "text.format and a tool_choice that forces a call would both constrain the output",
            )
            .into()),
            (format, calls) => format.or(calls),
        };
    Ok(prepared)
}

/// What needs state kept between requests, or runs on OpenAI's side.
fn refuse_state(req: &ResponsesRequest) -> Result<(), GatewayError> {
    let stateless =
        "this gateway keeps no state between requests (send the whole conversation in `input`)";
    let refusals = [
        (
            req.previous_response_id.is_some(),
            "previous_response_id",
            stateless,
        ),
        (req.conversation.is_some(), "conversation", stateless),
        (req.store == Some(true), "store", stateless),
        (
            req.background == Some(true),
            "background",
            "background responses need stored state, which this gateway does not keep",
        ),
        (
            req.prompt.is_some(),
            "prompt",
            "stored prompt templates are not supported",
        ),
        (
            req.truncation.as_deref().is_some_and(|t| t != "disabled"),
            "truncation",
            "only `disabled` truncation is supported: an input over the context is a 400",
        ),
        (
            req.top_logprobs.is_some_and(|n| n > 0),
            "top_logprobs",
            "logprobs are not supported on this route",
        ),
        (
            req.max_tool_calls.is_some(),
            "max_tool_calls",
            "max_tool_calls is not supported",
        ),
    ];
    for (refused, param, why) in refusals {
        if refused {
            return Err(invalid(param, format!("{param} is not supported: {why}")).into());
        }
    }
    Ok(())
}

fn tools(req: &ResponsesRequest) -> Result<Vec<Tool>, GatewayError> {
    let mut out = Vec::new();
    for (i, t) in req.tools.iter().flatten().enumerate() {
        if t.kind != "function" {
            return Err(GatewayError::invalid_body(
                format!("tools[{i}]: tool type `{}` is a built-in tool, which this gateway does not run; give function tools", t.kind),
                Some(format!("tools[{i}].type")),
            ));
        }
        let Some(name) = t.name.clone().filter(|n| !n.is_empty()) else {
            return Err(GatewayError::invalid_body(
                format!("tools[{i}].name is required for a function tool"),
                Some(format!("tools[{i}].name")),
            ));
        };
        out.push(Tool {
            kind: ToolKind::Function,
            function: FunctionDef {
                name,
                description: t.description.clone(),
                parameters: t.parameters.clone(),
                strict: t.strict,
            },
        });
    }
    Ok(out)
}

fn tool_choice(v: Option<&Value>) -> Result<Option<ToolChoice>, GatewayError> {
    let bad = || {
        invalid(
            "tool_choice",
            r#"tool_choice must be "none", "auto", "required" or {"type": "function", "name": "..."}"#,
        )
    };
    Ok(match v {
        None => None,
        Some(Value::String(s)) => Some(ToolChoice::Mode(match s.as_str() {
            "none" => ToolChoiceMode::None,
            "auto" => ToolChoiceMode::Auto,
            "required" => ToolChoiceMode::Required,
            _ => return Err(bad().into()),
        })),
        Some(Value::Object(o)) if o.get("type") == Some(&Value::from("function")) => {
            match o.get("name").and_then(Value::as_str) {
                Some(name) => Some(ToolChoice::Function(name.to_owned())),
                None => return Err(bad().into()),
            }
        }
        Some(_) => return Err(bad().into()),
    })
}

/// The input as chat messages, in order; consecutive `function_call` items join one assistant
/// turn's `tool_calls`.
fn chat_messages(req: &ResponsesRequest) -> Result<Vec<Value>, GatewayError> {
    let mut out = Vec::new();
    if let Some(instructions) = &req.instructions {
        out.push(json!({"role": "system", "content": instructions}));
    }
    let items = match &req.input {
        Input::Text(t) => {
            out.push(json!({"role": "user", "content": t}));
            return Ok(out);
        }
        Input::Items(items) => items,
    };
    let mut calls_open = false;
    for (i, item) in items.iter().enumerate() {
        let bad = |what: &str, field: &str| {
            GatewayError::invalid_body(
                format!("input[{i}]: {what}"),
                Some(format!("input[{i}].{field}")),
            )
        };
        let kind = item.kind.as_deref().unwrap_or("message");
        let is_call = kind == "function_call";
        match kind {
            "message" => out.push(message(item, &bad)?),
            "function_call" => {
                let call = function_call(item, &bad)?;
                match out.last_mut() {
                    Some(Value::Object(last)) if calls_open => {
                        if let Some(Value::Array(calls)) = last.get_mut("tool_calls") {
                            calls.push(call);
                        }
                    }
                    _ => out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let call_id = item.call_id.as_deref().ok_or_else(|| bad("call_id is required", "call_id"))?;
                let output = item.output.as_ref().ok_or_else(|| bad("output is required", "output"))?;
                let text = text_of(output, &bad, "output")?;
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text}));
            }
            // The model's earlier reasoning: chat templates leave earlier turns' reasoning out
            // of the prompt, so there is nothing to render.
            "reasoning" => {}
            other => {
                return Err(bad(
                    &format!("input items of type `{other}` are not supported (messages, function_call, function_call_output, reasoning)"),
                    "type",
                ))
            }
        }
        calls_open = is_call;
    }
    Ok(out)
}

fn message(
    item: &InputItem,
    bad: &dyn Fn(&str, &str) -> GatewayError,
) -> Result<Value, GatewayError> {
    let role = match item.role.as_deref() {
        Some(r) if ROLES.contains(&r) => r,
        Some(r) => {
            return Err(bad(
                &format!("role `{r}` is not one of {}", ROLES.join(", ")),
                "role",
            ))
        }
        None => return Err(bad("a message needs a role", "role")),
    };
    let content = item
        .content
        .as_ref()
        .ok_or_else(|| bad("a message needs content", "content"))?;
    Ok(json!({"role": role, "content": text_of(content, bad, "content")?}))
}

fn function_call(
    item: &InputItem,
    bad: &dyn Fn(&str, &str) -> GatewayError,
) -> Result<Value, GatewayError> {
    let call_id = item
        .call_id
        .as_deref()
        .ok_or_else(|| bad("call_id is required", "call_id"))?;
    let name = item
        .name
        .as_deref()
        .ok_or_else(|| bad("name is required", "name"))?;
    let arguments = item
        .arguments
        .as_deref()
        .ok_or_else(|| bad("arguments is required", "arguments"))?;
    // As SGLang before templating: the arguments as the object they encode.
    let arguments = serde_json::from_str::<Value>(arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::from(arguments));
    Ok(
        json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}),
    )
}

/// A message's text: the string, or its text parts (input or output text, a refusal).
fn text_of(
    content: &MessageContent,
    bad: &dyn Fn(&str, &str) -> GatewayError,
    field: &str,
) -> Result<Value, GatewayError> {
    let parts = match content {
        MessageContent::Text(t) => return Ok(Value::from(t.as_str())),
        MessageContent::Parts(p) => p,
    };
    let mut out = Vec::with_capacity(parts.len());
    for ContentPart {
        kind,
        text,
        refusal,
    } in parts
    {
        let text = match kind.as_str() {
            "input_text" | "output_text" | "text" => text.as_deref(),
            "refusal" => refusal.as_deref(),
            other => {
                return Err(bad(
                    &format!("content parts of type `{other}` are not supported (text only)"),
                    field,
                ))
            }
        };
        let text = text.ok_or_else(|| bad(&format!("a `{kind}` part needs its text"), field))?;
        out.push(json!({"type": "text", "text": text}));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> ResponsesRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn items_become_chat_messages() {
        let r = req(json!({"model": "m", "instructions": "be brief", "input": [
            {"role": "user", "content": "weather?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"c\": \"P\"}"},
            {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "oops"},
            {"type": "function_call_output", "call_id": "c1", "output": "9C"},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "It is 9C.", "annotations": []}]}]}));
        assert_eq!(
            Value::Array(chat_messages(&r).unwrap()),
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": {"c": "P"}}},
                    {"id": "c2", "type": "function", "function": {"name": "w", "arguments": "oops"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "9C"},
                {"role": "assistant", "content": [{"type": "text", "text": "It is 9C."}]}])
        );
    }

    #[test]
    fn state_and_built_in_tools_are_refused_by_name() {
        let param = |extra: Value| {
            let mut v = json!({"model": "m", "input": "hi"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let r = req(v);
            let e = refuse_state(&r)
                .and_then(|()| tools(&r).map(|_| ()))
                .and_then(|()| tool_choice(r.tool_choice.as_ref()).map(|_| ()))
                .unwrap_err();
            e.body().error.param.unwrap_or_default()
        };
        assert_eq!(
            param(json!({"previous_response_id": "resp_1"})),
            "previous_response_id"
        );
        assert_eq!(param(json!({"store": true})), "store");
        assert_eq!(param(json!({"background": true})), "background");
        assert_eq!(
            param(json!({"tools": [{"type": "web_search"}]})),
            "tools[0].type"
        );
        assert_eq!(param(json!({"tool_choice": "sometimes"})), "tool_choice");
        let ok = req(json!({"model": "m", "input": "hi", "store": false, "background": false}));
        assert!(refuse_state(&ok).is_ok());
    }
}
