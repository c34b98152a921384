//! From a parsed OpenAI request to what a worker needs: validated fields, the chat template
//! applied and the prompt tokenized once, sampling parameters within the context length.

use serde_json::Value;

use crate::error::GatewayError;
use crate::model::Model;
use crate::protocol::openai::{
    ChatCompletionRequest, CompletionRequest, Prompt, ResponseFormat, Sampling, HARMLESS_EXTENSIONS,
};
use crate::protocol::sampling::{invalid, requested_max_tokens};
use crate::protocol::sglang::SamplingParams;
use crate::reasoning::Format;
use crate::tokenize::{python_json_dumps_ascii, ChatTemplateInput};

mod chat_like;
pub mod messages;
pub mod responses;
mod schema;
mod tools;
use crate::tool_calls::Reading;
use chat_like::{chat_like, ChatLike};
use tools::{front_door_tools, legacy_functions, native_tools, Constraint, NativeTools};

pub struct Prepared {
    pub prompt_ids: Vec<u32>,
    pub params: SamplingParams,
    pub stream: bool,
    pub include_usage: bool,
    /// The request uses something only the worker's own OpenAI route implements (tools,
    /// response_format, logprobs, n > 1, …): forward the client's body as it is.
    pub forward: bool,
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
    check_openai_ranges(
        req.top_logprobs,
        20,
        "top_logprobs",
        req.logit_bias.as_ref(),
    )?;
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
        extra: req.chat_template_kwargs.as_ref(),
    };
    let prompt_ids = model.tokenizer.render_and_encode(&input)?;
    let max = req.max_completion_tokens.or(req.sampling.max_tokens);
    let param = if req.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let forward = chat_needs_worker_route(req, model.reasoning_parser.is_some());
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
        forward,
    )
    .and_then(|mut p| {
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

pub fn completion(model: &Model, req: &CompletionRequest) -> Result<Prepared, GatewayError> {
    check_model(model, &req.model)?;
    check_openai_ranges(req.logprobs, 5, "logprobs", req.logit_bias.as_ref())?;
    let mut forward = completion_needs_worker_route(req);
    // SGLang's completions route ignores `suffix`: refused rather than dropped.
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(invalid(
            "suffix",
            "suffix (insertion) is not supported by this model server",
        )
        .into());
    }
    if req.echo == Some(true) && req.logprobs.is_some() {
        return Err(invalid(
            "echo",
            "echo with logprobs needs the prompt's logprobs: use /generate with return_logprob and logprob_start_len",
        )
        .into());
    }
    let encode = |t: &str| {
        check_text_fits(model, t.len())?;
        Ok::<_, GatewayError>(model.tokenizer.encode(t, true)?)
    };
    let prompt_ids = match &req.prompt {
        Prompt::Text(t) => encode(t)?,
        Prompt::Ids(ids) => check_ids(model, ids.clone())?,
        Prompt::Texts(ts) if ts.len() == 1 => encode(&ts[0])?,
        Prompt::IdBatches(b) if b.len() == 1 => check_ids(model, b[0].clone())?,
        Prompt::Texts(ts) if !ts.is_empty() => {
            forward = true; // a batch: the worker's own route answers one choice per prompt
            encode(&ts[0])?
        }
        Prompt::IdBatches(b) if !b.is_empty() => {
            forward = true;
            check_ids(model, b[0].clone())?
        }
        _ => return Err(invalid("prompt", "prompt must not be empty").into()),
    };
    // OpenAI's completions default is 16 tokens.
    let max = req.sampling.max_tokens.or(Some(16));
    finish(
        model,
        prompt_ids,
        &req.sampling,
        max,
        "max_tokens",
        req.stream,
        req.stream_options.is_some_and(|o| o.include_usage),
        forward,
    )
    .and_then(|mut p| {
        structured_output(
            &mut p.params,
            req.response_format.as_ref(),
            req.json_schema.as_deref(),
        )?;
        // As SGLang's `_get_echo_text`: a text prompt as sent, ids decoded without special
        // tokens.
        let echo = match (&req.prompt, req.echo) {
            (_, None | Some(false)) => None,
            (Prompt::Text(t), _) => Some(t.clone()),
            (Prompt::Texts(ts), _) => ts.first().cloned(),
            (_, _) => Some(model.tokenizer.decode(&p.prompt_ids, true)?),
        };
        Ok(Prepared {
            user: req.user.clone(),
            logprobs: req.logprobs.map(u32::from),
            echo,
            ..p
        })
    })
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
    forward: bool,
) -> Result<Prepared, GatewayError> {
    let ctx = model.context_length;
    if prompt_ids.is_empty() {
        return Err(invalid("prompt", "the prompt is empty").into());
    }
    let max_tokens = requested_max_tokens(param, max, ctx)?;
    let room = ctx.saturating_sub(prompt_ids.len());
    let max_new = match max_tokens {
        Some(m) if m as usize > room => {
            return Err(GatewayError::ContextLength {
                context_length: ctx,
                requested: prompt_ids.len() + m as usize,
                prompt_tokens: prompt_ids.len(),
                max_tokens: m as usize,
            })
        }
        Some(m) => m,
        // Like SGLang's OpenAI routes: no limit means up to the context.
        None if room > 0 => room as u32,
        None => {
            return Err(GatewayError::ContextLength {
                context_length: ctx,
                requested: prompt_ids.len() + 1,
                prompt_tokens: prompt_ids.len(),
                max_tokens: 1,
            })
        }
    };
    let params = sampling.to_sglang(max_new)?;
    Ok(Prepared {
        prompt_ids,
        params,
        stream,
        include_usage,
        forward,
        reasoning: None,
        tool_calls: None,
        user: None,
        logprobs: None,
        echo: None,
    })
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

fn check_ids(model: &Model, ids: Vec<u32>) -> Result<Vec<u32>, GatewayError> {
    let vocab = model.tokenizer.vocab_size() as u32;
    match ids.iter().find(|&&t| t >= vocab) {
        Some(t) => Err(invalid(
            "prompt",
            format!("token id {t} is outside the vocabulary (size {vocab})"),
        )
        .into()),
        None => Ok(ids),
    }
}

/// What the gateway does not implement itself makes the worker's own route answer, so nothing
/// the client asked for is silently dropped. `separate_reasoning` is done here when the gateway
/// has a reasoning parser, and `tools` (with `tool_choice` absent, `"auto"` or `"none"`) when it
/// has a tool-call parser.
fn chat_needs_worker_route(req: &ChatCompletionRequest, reasoning_parser: bool) -> bool {
    !req.sampling.wants_single_choice()
        || req.logit_bias.as_ref().is_some_and(|b| !b.is_empty())
        || req.reasoning_effort.is_some()
        || req.verbosity.is_some()
        || (req.separate_reasoning.is_some() && !reasoning_parser)
        || req.modalities.is_some()
        || req.audio.is_some()
        || req.prediction.is_some()
        || req.web_search_options.is_some()
        || has_extensions(&req.extensions)
}

fn completion_needs_worker_route(req: &CompletionRequest) -> bool {
    !req.sampling.wants_single_choice()
        || req.best_of.is_some_and(|n| n > 1)
        || req.logit_bias.as_ref().is_some_and(|b| !b.is_empty())
        || has_extensions(&req.extensions)
}

fn has_extensions(names: &[String]) -> bool {
    names
        .iter()
        .any(|k| !HARMLESS_EXTENSIONS.contains(&k.as_str()))
}

/// OpenAI's own limits on fields the worker implements: refused here, before a worker is busy.
fn check_openai_ranges(
    count: Option<u8>,
    max: u8,
    param: &'static str,
    logit_bias: Option<&std::collections::HashMap<String, f64>>,
) -> Result<(), GatewayError> {
    if let Some(n) = count.filter(|&n| n > max) {
        return Err(invalid(
            param,
            format!("{param} must be between 0 and {max}, got {n}"),
        )
        .into());
    }
    for (token, bias) in logit_bias.into_iter().flatten() {
        if token.parse::<u32>().is_err() {
            return Err(invalid(
                "logit_bias",
                format!("logit_bias keys must be token ids, got {token:?}"),
            )
            .into());
        }
        if !(-100.0..=100.0).contains(bias) {
            return Err(invalid(
                "logit_bias",
                format!("logit_bias values must be between -100 and 100, got {bias}"),
            )
            .into());
        }
    }
    Ok(())
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
