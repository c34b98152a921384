//! An Anthropic Messages request as the chat it is: `system` and content blocks become chat
//! messages (`tool_use` an assistant's `tool_calls`, `tool_result` a `tool` message, thinking
//! the assistant's `reasoning_content`), tools become function tools, `thinking` the template's
//! reasoning switch; then prepared as chat is.

use serde_json::{json, Map, Value};

use super::{chat_like, check_model, front_door_tools, ChatLike, Prepared};
use crate::error::GatewayError;
use crate::model::Model;
use crate::protocol::anthropic::{
    Block, Content, MessagesRequest, Role, Thinking, ToolChoice as AnthropicChoice,
};
use crate::protocol::openai::{
    FunctionDef, Sampling, StopSpec, Tool, ToolChoice, ToolChoiceMode, ToolKind,
};
use crate::protocol::sampling::invalid;

/// Anthropic's own limits: 0 to 1 for temperature, thinking budgets from 1024 tokens.
const MAX_TEMPERATURE: f64 = 1.0;
const MIN_THINKING_BUDGET: i64 = 1024;
const MAX_STOP_SEQUENCES: usize = 16;

pub fn prepare(model: &Model, req: &MessagesRequest) -> Result<Prepared, GatewayError> {
    check_model(model, &req.model)?;
    refuse_hosted(req)?;
    if req.messages.is_empty() {
        return Err(invalid("messages", "messages must be a non-empty list").into());
    }
    if req
        .temperature
        .is_some_and(|t| !(0.0..=MAX_TEMPERATURE).contains(&t))
    {
        return Err(invalid("temperature", "temperature must be between 0 and 1").into());
    }
    let stop = req.stop_sequences.clone().unwrap_or_default();
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(invalid(
            "stop_sequences",
            format!("at most {MAX_STOP_SEQUENCES} stop sequences are allowed"),
        )
        .into());
    }
    if stop.iter().any(String::is_empty) {
        return Err(invalid("stop_sequences", "stop sequences must not be empty").into());
    }
    let tools = tools(req)?;
    let choice = req.tool_choice.as_ref().map(|c| match c {
        AnthropicChoice::Auto { .. } => ToolChoice::Mode(ToolChoiceMode::Auto),
        AnthropicChoice::Any { .. } => ToolChoice::Mode(ToolChoiceMode::Required),
        AnthropicChoice::Tool { name, .. } => ToolChoice::Function(name.clone()),
        AnthropicChoice::None => ToolChoice::Mode(ToolChoiceMode::None),
    });
    let front = front_door_tools(
        &tools,
        choice.as_ref(),
        model.tool_call_parser,
        "tool_choice",
    )?;
    let kwargs = thinking_kwargs(req)?;
    let messages = chat_messages(req);
    let sampling = Sampling {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop: Some(StopSpec::Many(stop)),
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
            max: Some(req.max_tokens),
            max_param: "max_tokens",
            stream: req.stream,
            user: req.metadata.as_ref().and_then(|m| m.user_id.clone()),
        },
    )?;
    prepared.params.json_schema = front.json_schema;
    Ok(prepared)
}

/// Features that run on Anthropic's side: a 400 naming them, not silence.
fn refuse_hosted(req: &MessagesRequest) -> Result<(), GatewayError> {
    for (present, param) in [
        (req.container.is_some(), "container"),
        (req.mcp_servers.is_some(), "mcp_servers"),
        (req.context_management.is_some(), "context_management"),
    ] {
        if present {
            return Err(invalid(param, format!("{param} is not supported by this gateway")).into());
        }
    }
    Ok(())
}

fn tools(req: &MessagesRequest) -> Result<Vec<Tool>, GatewayError> {
    let mut out = Vec::new();
    for t in req.tools.iter().flatten() {
        match t.kind.as_deref() {
            None | Some("custom") => {}
            Some(other) => {
                return Err(invalid(
                    "tools",
                    format!("tool type `{other}` runs on Anthropic's side and is not supported; give client tools with an input_schema"),
                )
                .into())
            }
        }
        out.push(Tool {
            kind: ToolKind::Function,
            function: FunctionDef {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.input_schema.clone(),
                strict: None,
            },
        });
    }
    Ok(out)
}

/// `thinking` as the template's switch: Qwen3-style templates read `enable_thinking`,
/// DeepSeek V3.1 and Kimi K2 `thinking`; a template reads the one it knows.
fn thinking_kwargs(req: &MessagesRequest) -> Result<Option<Map<String, Value>>, GatewayError> {
    let on = match &req.thinking {
        None => return Ok(None),
        Some(Thinking::Disabled) => false,
        Some(Thinking::Enabled { budget_tokens }) => {
            if *budget_tokens < MIN_THINKING_BUDGET || *budget_tokens >= req.max_tokens {
                return Err(invalid(
                    "thinking",
                    format!("thinking.budget_tokens must be at least {MIN_THINKING_BUDGET} and less than max_tokens"),
                )
                .into());
            }
            true
        }
    };
    let mut kwargs = Map::new();
    kwargs.insert("enable_thinking".into(), Value::Bool(on));
    kwargs.insert("thinking".into(), Value::Bool(on));
    Ok(Some(kwargs))
}

/// The conversation as chat messages, in order: a user turn's tool results become `tool`
/// messages where they stand among its text.
fn chat_messages(req: &MessagesRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = &req.system {
        out.push(json!({"role": "system", "content": system.0}));
    }
    for m in &req.messages {
        let blocks = match &m.content {
            Content::Text(t) => {
                out.push(json!({"role": role(m.role), "content": t}));
                continue;
            }
            Content::Blocks(b) => b,
        };
        match m.role {
            Role::User => user_turn(blocks, &mut out),
            Role::Assistant => out.push(assistant_turn(blocks)),
        }
    }
    out
}

fn role(r: Role) -> &'static str {
    match r {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn user_turn(blocks: &[Block], out: &mut Vec<Value>) {
    let mut text: Vec<&str> = Vec::new();
    let flush = |text: &mut Vec<&str>, out: &mut Vec<Value>| {
        if !text.is_empty() {
            out.push(json!({"role": "user", "content": text.join("\n")}));
            text.clear();
        }
    };
    for b in blocks {
        match b {
            Block::Text { text: t, .. } => text.push(t),
            Block::ToolResult {
                tool_use_id,
                content,
                ..
            } => {
                flush(&mut text, out);
                let content = content.as_ref().map_or("", |c| c.0.as_str());
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
            }
            // A user turn has no calls or thinking of its own; Anthropic refuses them there,
            // and nothing in them is for the model.
            Block::ToolUse { .. } | Block::Thinking { .. } | Block::RedactedThinking { .. } => {}
        }
    }
    flush(&mut text, out);
}

fn assistant_turn(blocks: &[Block]) -> Value {
    let mut text: Vec<&str> = Vec::new();
    let mut reasoning: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    for b in blocks {
        match b {
            Block::Text { text: t, .. } => text.push(t),
            Block::Thinking { thinking, .. } => reasoning.push(thinking),
            Block::ToolUse {
                id, name, input, ..
            } => calls.push(json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": input}})),
            Block::ToolResult { .. } | Block::RedactedThinking { .. } => {}
        }
    }
    let mut msg = Map::new();
    msg.insert("role".into(), Value::from("assistant"));
    msg.insert("content".into(), Value::from(text.join("")));
    if !reasoning.is_empty() {
        msg.insert("reasoning_content".into(), Value::from(reasoning.join("")));
    }
    if !calls.is_empty() {
        msg.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> MessagesRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn blocks_become_chat_messages_in_order() {
        let r = req(
            json!({"model": "m", "max_tokens": 9, "system": "sys", "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "P"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "9C"},
                {"type": "text", "text": "and?"}]}]}),
        );
        assert_eq!(
            Value::Array(chat_messages(&r)),
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "hm",
                 "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "w", "arguments": {"c": "P"}}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "9C"},
                {"role": "user", "content": "and?"}])
        );
    }

    #[test]
    fn thinking_sets_both_template_switches() {
        let base = json!({"model": "m", "max_tokens": 4096, "messages": []});
        let with = |t: Value| {
            let mut v = base.clone();
            v["thinking"] = t;
            thinking_kwargs(&req(v))
        };
        let on = with(json!({"type": "enabled", "budget_tokens": 2048}))
            .unwrap()
            .unwrap();
        assert_eq!(on["enable_thinking"], true);
        assert_eq!(on["thinking"], true);
        let off = with(json!({"type": "disabled"})).unwrap().unwrap();
        assert_eq!(off["enable_thinking"], false);
        assert!(with(json!({"type": "enabled", "budget_tokens": 10})).is_err());
        assert!(with(json!({"type": "enabled", "budget_tokens": 5000})).is_err());
        assert!(thinking_kwargs(&req(base)).unwrap().is_none());
    }
}
