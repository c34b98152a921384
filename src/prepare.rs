//! From a parsed OpenAI request to what a worker needs: validated fields, the chat template
//! applied and the prompt tokenized once, sampling parameters within the context length.

use serde_json::Value;

use crate::error::GatewayError;
use crate::model::Model;
use crate::protocol::openai::{ChatCompletionRequest, ResponseFormat, Sampling};
use crate::protocol::sampling::{invalid, requested_max_tokens};
use crate::protocol::sglang::SamplingParams;
use crate::reasoning::Format;
use crate::tokenize::{python_json_dumps_ascii, ChatTemplateInput};

mod chat_like;
mod completion;
mod fields;
pub mod messages;
pub mod responses;
mod schema;
mod tools;
use crate::tool_calls::Reading;
use chat_like::{chat_like, ChatLike};
pub use completion::completion;
use fields::check_openai_ranges;
use tools::{front_door_tools, legacy_functions, native_tools, Constraint, NativeTools};

pub struct Prepared {
    pub prompt_ids: Vec<u32>,
    pub params: SamplingParams,
    pub stream: bool,
    pub include_usage: bool,
    /// Generations per prompt (`n`; 1 unless asked for more).
    pub n: u32,
    /// A batched completion's prompts after the first (`prompt_ids`), in order.
    pub batch: Vec<BatchPrompt>,
    /// Split the output into reasoning and content, read this way (chat with a reasoning
    /// parser, unless the request says `separate_reasoning: false`).
    pub reasoning: Option<Format>,
    /// Read the output for tool calls this way (chat with a tool-call parser and `tools`,
    /// unless `tool_choice` is `"none"`).
    pub tool_calls: Option<Reading>,
    /// The OpenAI `user` field (a session key for session-affine routing).
    pub user: Option<String>,
    /// Output logprobs with this many top tokens each (`None`: not asked for): chat's
    /// `logprobs: true` with `top_logprobs`, completions' `logprobs` count.
    pub logprobs: Option<u32>,
    /// Completions' `echo`: the prompt's text, written before the answer.
    pub echo: Option<String>,
}

/// One more prompt of a batched completion.
pub struct BatchPrompt {
    pub ids: Vec<u32>,
    /// Its `echo` text.
    pub echo: Option<String>,
}

const ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];
const MAX_MESSAGES: usize = 10_000;

pub fn chat(model: &Model, req: &ChatCompletionRequest) -> Result<Prepared, GatewayError> {
    check_model(model, &req.model)?;
    if req.messages.is_empty() {
        return Err(invalid("messages", "messages must be a non-empty list").into());
    }
    if req.messages.len() > MAX_MESSAGES {
        return Err(invalid(
            "messages",
            format!("at most {MAX_MESSAGES} messages are allowed"),
        )
        .into());
    }
    let mut text_bytes = 0;
    for (i, m) in req.messages.iter().enumerate() {
        check_message(i, m)?;
        text_bytes += string_bytes(m);
    }
    check_text_fits(model, text_bytes)?;
    let logit_bias = check_openai_ranges(
        model,
        req.top_logprobs,
        20,
        "top_logprobs",
        req.logit_bias.as_ref(),
    )?;
    fields::check_chat_outputs(req)?;
    fields::check_extensions(&req.extensions)?;
    let kwargs = fields::template_kwargs(req)?;
    let (legacy_tools, legacy_choice) = legacy_functions(
        req.functions.as_deref(),
        req.function_call.as_ref(),
        req.tools.is_some() || req.tool_choice.is_some(),
    )?;
    let offered = req.tools.as_deref().or(legacy_tools.as_deref());
    let choice = req.tool_choice.as_ref().or(legacy_choice.as_ref());
    for (i, tool) in offered.into_iter().flatten().enumerate() {
        if let Some(params) = &tool.function.parameters {
            schema::check(&Value::Object(params.clone())).map_err(|e| {
                invalid(
                    "tools",
                    format!("Tool {i} function has invalid 'parameters' schema: {e}"),
                )
            })?;
        }
    }
    let tools = native_tools(offered, choice, model.tool_call_parser)?;
    let input = ChatTemplateInput {
        messages: &req.messages,
        // As SGLang: `tool_choice: "none"` leaves the tools out of the prompt.
        tools: match &tools {
            NativeTools::Offered { rendered, .. } => Some(rendered),
            NativeTools::None | NativeTools::Hidden => None,
        },
        add_generation_prompt: true,
        extra: Some(&*kwargs),
    };
    let prompt_ids = model.tokenizer.render_and_encode(&input)?;
    let max = req.max_completion_tokens.or(req.sampling.max_tokens);
    let param = if req.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    // SGLang's default is to separate the reasoning whenever the server has a parser.
    let reasoning = model
        .reasoning_parser
        .filter(|_| req.separate_reasoning != Some(false))
        .map(|kind| kind.format(req.chat_template_kwargs.as_ref()));
    finish(
        model,
        prompt_ids,
        &req.sampling,
        max,
        param,
        req.stream,
        req.stream_options.is_some_and(|o| o.include_usage),
    )
    .and_then(|mut p| {
        p.params.logit_bias = logit_bias;
        structured_output(&mut p.params, req.response_format.as_ref(), None)?;
        // As SGLang for a gpt-oss model: its Harmony markers are special tokens the parsers read.
        if model.reasoning_parser == Some(crate::reasoning::ParserKind::GptOss)
            || model.tool_call_parser == Some(crate::tool_calls::ParserKind::GptOss)
        {
            p.params.skip_special_tokens = Some(false);
        }
        let (reading, constraint) = match tools {
            NativeTools::Offered {
                reading,
                constraint,
                ..
            } => {
                // SGLang keeps special tokens in the text a tool-call parser reads.
                p.params.skip_special_tokens = Some(false);
                (reading, constraint)
            }
            NativeTools::None | NativeTools::Hidden => (None, None),
        };
        constrain(&mut p.params, constraint);
        Ok(Prepared {
            user: req.user.clone(),
            reasoning,
            tool_calls: reading,
            // As SGLang: `top_logprobs` counts only with `logprobs: true`.
            logprobs: (req.logprobs == Some(true))
                .then(|| u32::from(req.top_logprobs.unwrap_or(0))),
            ..p
        })
    })
}

/// A tool choice's constraint, unless the request already constrains the output (SGLang then
/// keeps the request's and drops the tools', with a warning).
fn constrain(params: &mut SamplingParams, constraint: Option<Constraint>) {
    let constrained = params.json_schema.is_some()
        || params.regex.is_some()
        || params.ebnf.is_some()
        || params.structural_tag.is_some();
    match constraint {
        _ if constrained => {}
        None => {}
        Some(Constraint::JsonSchema(s)) => params.json_schema = Some(s),
        Some(Constraint::StructuralTag(s)) => params.structural_tag = Some(s),
    }
}

/// `response_format` (and completions' `json_schema` text) as SGLang's `to_sampling_params`
/// maps it, the schema checked here; then SGLang's rule that one output constraint at most is
/// set (`regex`, `ebnf` and `json_schema` came from the request's own fields).
fn structured_output(
    params: &mut SamplingParams,
    format: Option<&ResponseFormat>,
    schema_text: Option<&str>,
) -> Result<(), GatewayError> {
    if let Some(text) = schema_text {
        let schema: Value = serde_json::from_str(text)
            .map_err(|e| invalid("json_schema", format!("json_schema is not JSON: {e}")))?;
        schema::check(&schema).map_err(|e| invalid("json_schema", e))?;
        params.json_schema = Some(text.to_owned());
    }
    match format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => {
            params.json_schema = Some(r#"{"type": "object"}"#.into())
        }
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let Some(schema) = &json_schema.schema else {
                return Err(invalid(
                    "response_format",
                    "schema_ is required for json_schema response format request.",
                )
                .into());
            };
            let schema = Value::Object(schema.clone());
            schema::check(&schema).map_err(|e| {
                invalid(
                    "response_format",
                    format!("response_format.json_schema.schema: {e}"),
                )
            })?;
            params.json_schema = Some(python_json_dumps_ascii(&schema));
        }
    }
    let set = [
        ("regex", params.regex.is_some()),
        ("ebnf", params.ebnf.is_some()),
        ("json_schema", params.json_schema.is_some()),
    ];
    if set.iter().filter(|(_, on)| *on).count() > 1 {
        let param = if format.is_some_and(|f| !matches!(f, ResponseFormat::Text)) {
            "response_format"
        } else {
            set.iter()
                .rev()
                .find(|(_, on)| *on)
                .map_or("regex", |(p, _)| p)
        };
        return Err(invalid(param, "Only one of regex, json_schema, or ebnf can be set.").into());
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn finish(
    model: &Model,
    prompt_ids: Vec<u32>,
    sampling: &Sampling,
    max: Option<i64>,
    param: &'static str,
    stream: bool,
    include_usage: bool,
) -> Result<Prepared, GatewayError> {
    let max_tokens = requested_max_tokens(param, max, model.context_length)?;
    let max_new = room_for(model, &prompt_ids, max_tokens)?;
    let params = sampling.to_sglang(max_new)?;
    Ok(Prepared {
        prompt_ids,
        params,
        stream,
        include_usage,
        n: sampling
            .n
            .map_or(1, |n| n.clamp(1, i64::from(u32::MAX)) as u32),
        batch: Vec::new(),
        reasoning: None,
        tool_calls: None,
        user: None,
        logprobs: None,
        echo: None,
    })
}

/// The tokens a prompt leaves room for in the context: `max_tokens` if it fits, all of the
/// room if not given (like SGLang's OpenAI routes).
fn room_for(
    model: &Model,
    prompt_ids: &[u32],
    max_tokens: Option<u32>,
) -> Result<u32, GatewayError> {
    let ctx = model.context_length;
    if prompt_ids.is_empty() {
        return Err(invalid("prompt", "the prompt is empty").into());
    }
    let room = ctx.saturating_sub(prompt_ids.len());
    match max_tokens {
        Some(m) if m as usize > room => Err(GatewayError::ContextLength {
            context_length: ctx,
            requested: prompt_ids.len() + m as usize,
            prompt_tokens: prompt_ids.len(),
            max_tokens: m as usize,
        }),
        Some(m) => Ok(m),
        None if room > 0 => Ok(room as u32),
        None => Err(GatewayError::ContextLength {
            context_length: ctx,
            requested: prompt_ids.len() + 1,
            prompt_tokens: prompt_ids.len(),
            max_tokens: 1,
        }),
    }
}

fn check_model(model: &Model, name: &str) -> Result<(), GatewayError> {
    if model.serves(name) {
        Ok(())
    } else {
        Err(GatewayError::ModelNotFound(name.to_owned()))
    }
}

fn check_message(i: usize, m: &Value) -> Result<(), GatewayError> {
    let bad = |msg: String| GatewayError::invalid_body(msg, Some(format!("messages[{i}]")));
    let Some(obj) = m.as_object() else {
        return Err(bad(format!("messages[{i}] must be an object")));
    };
    match obj.get("role").and_then(Value::as_str) {
        Some(r) if ROLES.contains(&r) => {}
        Some(r) => {
            return Err(bad(format!(
                "messages[{i}].role `{r}` is not one of {}",
                ROLES.join(", ")
            )))
        }
        None => {
            return Err(bad(format!(
                "messages[{i}].role is required and must be a string"
            )))
        }
    }
    match obj.get("content") {
        None | Some(Value::Null) | Some(Value::String(_)) | Some(Value::Array(_)) => Ok(()),
        Some(_) => Err(bad(format!(
            "messages[{i}].content must be a string, a list of content parts, or null"
        ))),
    }
}

/// A text that cannot fit the context whatever it tokenizes to is refused before tokenizing
/// (see `Model::max_prompt_text_bytes`).
pub fn check_text_fits(model: &Model, bytes: usize) -> Result<(), GatewayError> {
    match model.max_prompt_text_bytes() {
        Some(max) if bytes > max => Err(GatewayError::PromptTextTooLong {
            bytes,
            context_length: model.context_length,
        }),
        _ => Ok(()),
    }
}

/// Bytes of all strings in a JSON value (a message's text, wherever the template takes it from).
fn string_bytes(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(string_bytes).sum(),
        Value::Object(map) => map.iter().map(|(k, v)| k.len() + string_bytes(v)).sum(),
        _ => 0,
    }
}
