//! OpenAI fields the gateway serves itself on the token-id path (nothing is forwarded to a
//! worker's own OpenAI route): checked and mapped as SGLang's own server maps them, or refused
//! by name when they ask for what no SGLang worker does.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::error::GatewayError;
use crate::model::Model;
use crate::protocol::openai::ChatCompletionRequest;
use crate::protocol::sampling::invalid;

/// Most generations one request may make (prompts × `n`): each is a worker request (whose
/// rid numbers it in four digits, see `server::handlers::dispatch`).
pub const MAX_GENERATIONS: usize = 1024;

/// SGLang's extensions that change a generation and that the gateway does not implement on
/// the token-id path: refused by name (the native `/generate` route takes most of them).
/// Other unknown fields are ignored, as SGLang's request models ignore them.
const UNSUPPORTED_EXTENSIONS: &[&str] = &[
    "lora_path",
    "custom_logit_processor",
    "custom_params",
    "return_hidden_states",
    "return_routed_experts",
    "continue_final_message",
    "session_params",
    "stop_regex",
    "stream_reasoning",
    "max_dynamic_patch",
    "min_dynamic_patch",
];

/// OpenAI's own limits (a top-logprobs `count` up to `max`, `logit_bias` entries), and
/// SGLang's (`logit_bias` keys within the vocabulary): refused here, before a worker is busy.
/// The bias goes to SGLang's `logit_bias` sampling parameter as it came.
pub fn check_openai_ranges(
    model: &Model,
    count: Option<u8>,
    max: u8,
    param: &'static str,
    logit_bias: Option<&HashMap<String, f64>>,
) -> Result<Option<Value>, GatewayError> {
    if let Some(n) = count.filter(|&n| n > max) {
        return Err(invalid(
            param,
            format!("{param} must be between 0 and {max}, got {n}"),
        )
        .into());
    }
    let vocab = model.tokenizer.vocab_size();
    for (token, bias) in logit_bias.into_iter().flatten() {
        match token.parse::<usize>() {
            Ok(id) if id < vocab => {}
            Ok(_) => {
                return Err(invalid(
                    "logit_bias",
                    format!("logit_bias keys must be token ids below {vocab}, got {token}"),
                )
                .into())
            }
            Err(_) => {
                return Err(invalid(
                    "logit_bias",
                    format!("logit_bias keys must be token ids, got {token:?}"),
                )
                .into())
            }
        }
        if !(-100.0..=100.0).contains(bias) {
            return Err(invalid(
                "logit_bias",
                format!("logit_bias values must be between -100 and 100, got {bias}"),
            )
            .into());
        }
    }
    Ok(logit_bias
        .filter(|b| !b.is_empty())
        .and_then(|b| serde_json::to_value(b).ok()))
}

/// The chat template's extra variables, as SGLang's `serving_chat` passes them: the
/// request's `chat_template_kwargs`, and `reasoning_effort` always (SGLang's default is
/// `"medium"`; one in `chat_template_kwargs` wins).
pub fn template_kwargs(
    req: &ChatCompletionRequest,
) -> Result<Cow<'static, Map<String, Value>>, GatewayError> {
    const EFFORTS: [&str; 3] = ["low", "medium", "high"];
    let effort = req.reasoning_effort.as_deref().unwrap_or("medium");
    let Some(level) = EFFORTS.iter().position(|e| *e == effort) else {
        return Err(invalid(
            "reasoning_effort",
            format!("reasoning_effort must be one of low, medium, high, got {effort:?}"),
        )
        .into());
    };
    let Some(given) = &req.chat_template_kwargs else {
        // Most requests: the effort alone, made once (not a map allocated per request).
        static ALONE: OnceLock<[Map<String, Value>; 3]> = OnceLock::new();
        let alone = ALONE.get_or_init(|| {
            EFFORTS.map(|e| Map::from_iter([("reasoning_effort".to_owned(), Value::from(e))]))
        });
        return Ok(Cow::Borrowed(&alone[level]));
    };
    let mut kwargs = given.clone();
    kwargs
        .entry("reasoning_effort")
        .or_insert_with(|| Value::from(effort));
    Ok(Cow::Owned(kwargs))
}

/// Chat fields that ask for an output no SGLang worker makes (audio, web search) are refused;
/// hints that change nothing a worker computes (`verbosity`, `prediction`, text-only
/// `modalities`) are ignored, as SGLang ignores them.
pub fn check_chat_outputs(req: &ChatCompletionRequest) -> Result<(), GatewayError> {
    let audio_out = req.audio.is_some()
        || req
            .modalities
            .iter()
            .flatten()
            .any(|m| m.as_str() != "text");
    if audio_out {
        let param = if req.audio.is_some() {
            "audio"
        } else {
            "modalities"
        };
        return Err(invalid(param, "only text output is supported by this model server").into());
    }
    if req.web_search_options.is_some() {
        return Err(invalid(
            "web_search_options",
            "web search is not supported by this model server",
        )
        .into());
    }
    Ok(())
}

/// Top-level fields outside the OpenAI API: SGLang's that the token-id path does not
/// implement are refused by name; the rest are ignored (see [`UNSUPPORTED_EXTENSIONS`]).
pub fn check_extensions(names: &[String]) -> Result<(), GatewayError> {
    match names
        .iter()
        .find(|k| UNSUPPORTED_EXTENSIONS.contains(&k.as_str()))
    {
        Some(name) => Err(GatewayError::invalid_body(
            format!("`{name}` is not supported on /v1 routes by this gateway; the native /generate route takes SGLang's extensions"),
            Some(name.clone()),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(extra: Value) -> ChatCompletionRequest {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn reasoning_effort_reaches_the_template_as_sglang_passes_it() {
        let effort = |extra| template_kwargs(&chat(extra)).unwrap()["reasoning_effort"].clone();
        assert_eq!(effort(json!({})), "medium");
        assert_eq!(effort(json!({"reasoning_effort": "low"})), "low");
        // One in chat_template_kwargs wins (SGLang pops it into the request's).
        let both = json!({"reasoning_effort": "low",
                          "chat_template_kwargs": {"reasoning_effort": "high", "enable_thinking": false}});
        let kwargs = template_kwargs(&chat(both)).unwrap();
        assert_eq!(kwargs["reasoning_effort"], "high");
        assert_eq!(kwargs["enable_thinking"], false);
        assert!(template_kwargs(&chat(json!({"reasoning_effort": "max"}))).is_err());
    }

    #[test]
    fn outputs_no_worker_makes_are_refused_and_hints_ignored() {
        let ok = |extra| check_chat_outputs(&chat(extra)).is_ok();
        assert!(ok(
            json!({"modalities": ["text"], "verbosity": "low", "prediction": {}})
        ));
        assert!(!ok(json!({"modalities": ["text", "audio"]})));
        assert!(!ok(json!({"audio": {"voice": "alloy"}})));
        assert!(!ok(json!({"web_search_options": {}})));
        assert!(check_extensions(&["frobnicate".into(), "rid".into()]).is_ok());
        assert!(check_extensions(&["lora_path".into()]).is_err());
    }
}
