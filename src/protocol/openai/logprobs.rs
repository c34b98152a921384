//! Log probabilities as OpenAI returns them: chat's `{"content": [{token, logprob, bytes,
//! top_logprobs}]}` and completions' `{text_offset, token_logprobs, tokens, top_logprobs}`,
//! from SGLang's `return_logprob` output (a token's text is its id decoded alone, as SGLang's
//! `detokenize_logprob_tokens`; `bytes` are that text's UTF-8 bytes).

use serde_json::{json, Map, Value};

/// One output token: its text, its log probability, and the most likely tokens at its place.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    pub top: Vec<(String, f64)>,
}

/// Chat's `logprobs` object for these tokens.
pub fn chat(tokens: &[TokenLogprob]) -> Value {
    let entry = |token: &str, logprob: f64| json!({"token": token, "logprob": logprob, "bytes": token.as_bytes()});
    let content: Vec<Value> = tokens
        .iter()
        .map(|t| {
            let mut e = entry(&t.token, t.logprob);
            e["top_logprobs"] = t.top.iter().map(|(tok, l)| entry(tok, *l)).collect();
            e
        })
        .collect();
    json!({ "content": content })
}

/// Completions' `logprobs` object for these tokens, the first of them at `offset` characters
/// into the text; `with_top`: the request asked for a top list (`logprobs` > 0).
pub fn text(tokens: &[TokenLogprob], offset: usize, with_top: bool) -> Value {
    let mut offsets = Vec::with_capacity(tokens.len());
    let mut at = offset;
    for t in tokens {
        offsets.push(at);
        at += t.token.chars().count();
    }
    let top: Vec<Value> = tokens
        .iter()
        .map(|t| {
            let map: Map<String, Value> = t
                .top
                .iter()
                .map(|(tok, l)| (tok.clone(), json!(l)))
                .collect();
            Value::Object(map)
        })
        .collect();
    json!({
        "text_offset": offsets,
        "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "tokens": tokens.iter().map(|t| t.token.as_str()).collect::<Vec<_>>(),
        "top_logprobs": if with_top { top } else { Vec::new() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_openai_s() {
        let t = |s: &str, l: f64| TokenLogprob {
            token: s.into(),
            logprob: l,
            top: vec![(s.into(), l), ("x".into(), l - 1.0)],
        };
        let tokens = [t("Hé", -0.5), t(" y", -1.0)];
        assert_eq!(
            chat(&tokens)["content"][0],
            json!({"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169],
                   "top_logprobs": [{"token": "Hé", "logprob": -0.5, "bytes": [72, 195, 169]},
                                    {"token": "x", "logprob": -1.5, "bytes": [120]}]})
        );
        assert_eq!(
            text(&tokens, 3, true),
            json!({"text_offset": [3, 5], "token_logprobs": [-0.5, -1.0], "tokens": ["Hé", " y"],
                   "top_logprobs": [{"Hé": -0.5, "x": -1.5}, {" y": -1.0, "x": -2.0}]})
        );
    }
}
