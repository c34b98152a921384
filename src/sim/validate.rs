//! The checks SGLang's front end makes before a request reaches the scheduler, each a
//! `ValueError` there: `SamplingParams.verify` (`sampling/sampling_params.py`) and
//! `TokenizerManager._validate_one_request` (`managers/tokenizer_manager.py`). A `/generate`
//! stream reports them as an SSE error event after a 200; everything else as a 400.

use super::version::SglangVersion;
use crate::protocol::sglang::SamplingParams;

/// `SamplingParams.verify`, for the fields the simulator reads (same bounds in 0.5.9 and 0.5.23).
pub fn sampling(p: &SamplingParams) -> Result<(), String> {
    let within = |v: Option<f64>, lo: f64, hi: f64| v.is_none_or(|v| (lo..=hi).contains(&v));
    if let Some(t) = p.temperature.filter(|t| !t.is_finite() || *t < 0.0) {
        return Err(format!("temperature must be non-negative, got {t}."));
    }
    if let Some(t) = p.top_p.filter(|t| !(*t > 0.0 && *t <= 1.0)) {
        return Err(format!("top_p must be in (0, 1], got {t}."));
    }
    if !within(p.min_p, 0.0, 1.0) {
        return Err(format!("min_p must be in [0, 1], got {:?}.", p.min_p));
    }
    // -1 means "disabled" (SGLang turns it into 2^30 before verifying).
    if let Some(k) = p.top_k.filter(|k| *k != -1 && *k < 1) {
        return Err(format!(
            "top_k must be -1 (disable) or at least 1, got {k}."
        ));
    }
    if !within(p.frequency_penalty, -2.0, 2.0) {
        return Err(format!(
            "frequency_penalty must be in [-2, 2], got {:?}.",
            p.frequency_penalty
        ));
    }
    if !within(p.presence_penalty, -2.0, 2.0) {
        return Err(format!(
            "presence_penalty must be in [-2, 2], got {:?}.",
            p.presence_penalty
        ));
    }
    if !within(p.repetition_penalty, 0.0, 2.0) {
        return Err(format!(
            "repetition_penalty must be in [0, 2], got {:?}.",
            p.repetition_penalty
        ));
    }
    if let (Some(min), Some(max)) = (p.min_new_tokens, p.max_new_tokens) {
        if min > max {
            return Err(format!(
                "min_new_tokens must be in [0, max_new_tokens({max})], got {min}."
            ));
        }
    }
    let grammars = [&p.json_schema, &p.regex, &p.ebnf];
    if grammars.iter().filter(|g| g.is_some()).count() > 1 {
        return Err("Only one of regex, json_schema, or ebnf can be set.".into());
    }
    Ok(())
}

/// `_validate_one_request`: the prompt must leave room for one token in both versions; the
/// requested total is checked only when `max_new_tokens` was given, with the version's bound.
pub fn lengths(
    version: SglangVersion,
    prompt: usize,
    max_new_tokens: Option<u32>,
    context: usize,
) -> Result<(), String> {
    if prompt >= context {
        return Err(format!(
            "The input ({prompt} tokens) is longer than the model's context length ({context} tokens)."
        ));
    }
    if let Some(max_new) = max_new_tokens.map(|m| m as usize) {
        if version.exceeds_context(prompt, max_new, context) {
            return Err(format!(
                "Requested token count exceeds the model's maximum context length of {context} tokens. \
                 You requested a total of {} tokens: {prompt} tokens from the input messages and \
                 {max_new} tokens for the completion. Please reduce the number of tokens in the input \
                 messages or the completion to fit within the limit.",
                prompt + max_new
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: serde_json::Value) -> SamplingParams {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn sampling_bounds_follow_verify() {
        use serde_json::json;
        assert!(sampling(&params(
            json!({"temperature": 0.0, "top_p": 1.0, "top_k": -1})
        ))
        .is_ok());
        for bad in [
            json!({"temperature": -1}),
            json!({"top_p": 2}),
            json!({"top_p": 0}),
            json!({"top_k": 0}),
            json!({"min_p": 1.5}),
            json!({"frequency_penalty": 3}),
            json!({"repetition_penalty": -0.1}),
            json!({"min_new_tokens": 5, "max_new_tokens": 4}),
            json!({"regex": "a", "ebnf": "b"}),
        ] {
            assert!(sampling(&params(bad.clone())).is_err(), "{bad}");
        }
    }

    #[test]
    fn context_bound_differs_by_version() {
        // Exactly filling the context: 0.5.9 refuses (`>=`), 0.5.23 accepts (`>`).
        assert!(lengths(SglangVersion::V0_5_9, 10, Some(6), 16).is_err());
        assert!(lengths(SglangVersion::V0_5_23, 10, Some(6), 16).is_ok());
        assert!(lengths(SglangVersion::V0_5_23, 10, Some(7), 16).is_err());
        assert!(lengths(SglangVersion::V0_5_23, 16, None, 16).is_err());
        assert!(lengths(SglangVersion::V0_5_9, 15, None, 16).is_ok());
    }
}
