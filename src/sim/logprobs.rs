//! Log probabilities on the OpenAI routes, in SGLang's shapes: chat's `{"content": [{token,
//! bytes, logprob, top_logprobs: [{token, bytes, logprob}]}]}` (`serving_chat.py::
//! _process_logprobs_tokens`) and completions' `{text_offset, token_logprobs, tokens,
//! top_logprobs: [{token: logprob}]}` with every `text_offset` -1 (`openai/utils.py::
//! to_openai_style_logprobs`). A token's text is its id decoded alone.
//!
//! The values are a model, not a language model's: token `id` at output position `p` gets
//! `-(hash(id, p) mod 3000) / 1000`, in (-3, 0]; it is always the most likely token, so a top
//! list of `k` holds it first and then `k - 1` other vocabulary tokens, each 0.5 less likely
//! than the one before.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::tokenize::Tokenizer;

/// One output token: its text, its logprob, and its top list of texts and logprobs.
type Token = (String, f64, Vec<(String, f64)>);

/// What a request asked for, and how to write it.
#[derive(Clone)]
pub struct Logprobs {
    tokenizer: Arc<Tokenizer>,
    /// How many entries each top list has (0: empty lists).
    top: usize,
    chat: bool,
}

impl Logprobs {
    pub fn new(tokenizer: Arc<Tokenizer>, top: usize, chat: bool) -> Logprobs {
        Logprobs {
            tokenizer,
            top,
            chat,
        }
    }

    /// The `logprobs` object for `ids`, the output tokens from position `first` on.
    pub fn value(&self, ids: &[u32], first: usize) -> Value {
        let tokens: Vec<Token> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| self.token(id, first + i))
            .collect();
        if self.chat {
            let entry = |text: &str, logprob: f64| json!({"token": text, "bytes": text.as_bytes(), "logprob": logprob});
            let content: Vec<Value> = tokens
                .iter()
                .map(|(text, logprob, top)| {
                    let mut e = entry(text, *logprob);
                    let top: Vec<Value> = top.iter().map(|(t, l)| entry(t, *l)).collect();
                    e["top_logprobs"] = Value::Array(top);
                    e
                })
                .collect();
            return json!({ "content": content });
        }
        let top: Vec<Value> = tokens
            .iter()
            .map(|(_, _, top)| {
                let map: Map<String, Value> =
                    top.iter().map(|(t, l)| (t.clone(), json!(l))).collect();
                Value::Object(map)
            })
            .collect();
        json!({
            "text_offset": vec![-1; tokens.len()],
            "token_logprobs": tokens.iter().map(|t| t.1).collect::<Vec<_>>(),
            "tokens": tokens.iter().map(|t| t.0.clone()).collect::<Vec<_>>(),
            "top_logprobs": if self.top == 0 { Vec::new() } else { top },
        })
    }

    fn token(&self, id: u32, position: usize) -> Token {
        let vocab = self.tokenizer.vocab_size();
        let top = top_tokens(id, position, self.top, vocab)
            .into_iter()
            .map(|(other, logprob)| (self.text(other), logprob))
            .collect();
        (self.text(id), sampled_logprob(id, position), top)
    }

    fn text(&self, id: u32) -> String {
        self.tokenizer.decode(&[id], false).unwrap_or_default()
    }
}

pub fn sampled_logprob(id: u32, position: usize) -> f64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (id, position).hash(&mut h);
    -((h.finish() % 3000) as f64) / 1000.0
}

/// The `top` most likely tokens at output `position` where `id` was sampled: `id` first, then
/// other vocabulary tokens, each 0.5 less likely than the one before.
pub fn top_tokens(id: u32, position: usize, top: usize, vocab: usize) -> Vec<(u32, f64)> {
    let logprob = sampled_logprob(id, position);
    let vocab = vocab.max(1) as u64;
    (0..top)
        .map(|j| {
            let other = (u64::from(id) + j as u64 * 7919) % vocab;
            (other as u32, logprob - 0.5 * j as f64)
        })
        .collect()
}

/// `/generate`'s `return_logprob`: `[logprob, id, text or null]` per token, cumulative in every
/// chunk, and with `top_logprobs_num > 0` a list of such triples per token
/// (`tokenizer_manager.py::add_logprob_to_meta_info`, `detokenize_logprob_tokens`). The prompt's
/// part starts at `logprob_start_len`, -1 meaning its last token (`scheduler.py`); the
/// prompt's first token has no logprob (`null`).
pub struct Native {
    pub tokenizer: Arc<Tokenizer>,
    pub top: usize,
    pub with_text: bool,
    pub prompt: Vec<u32>,
    pub start: usize,
}

/// The `meta_info` fields [`Native`] adds.
#[derive(serde::Serialize)]
pub struct NativeFields {
    input_token_logprobs: Vec<Value>,
    output_token_logprobs: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_top_logprobs: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_top_logprobs: Option<Vec<Value>>,
}

impl Native {
    pub fn fields(&self, output: &[u32]) -> NativeFields {
        let input: Vec<(usize, u32)> = self.prompt.iter().copied().enumerate().collect();
        let input = &input[self.start.min(input.len())..];
        let output: Vec<(usize, u32)> = output.iter().copied().enumerate().collect();
        let top = |list: &[(usize, u32)], in_prompt: bool| {
            list.iter()
                .map(|&(p, id)| self.top_list(id, p, in_prompt))
                .collect()
        };
        NativeFields {
            input_token_logprobs: input.iter().map(|&(p, id)| self.input(id, p)).collect(),
            output_token_logprobs: output
                .iter()
                .map(|&(p, id)| self.triple(sampled_logprob(id, p), id))
                .collect(),
            input_top_logprobs: (self.top > 0).then(|| top(input, true)),
            output_top_logprobs: (self.top > 0).then(|| top(&output, false)),
        }
    }

    fn input(&self, id: u32, position: usize) -> Value {
        if position == 0 {
            return json!([null, id, self.text(id)]);
        }
        self.triple(sampled_logprob(id, position), id)
    }

    fn top_list(&self, id: u32, position: usize, in_prompt: bool) -> Value {
        // The prompt's first token has no top list either.
        if in_prompt && position == 0 {
            return Value::Null;
        }
        let vocab = self.tokenizer.vocab_size();
        let top: Vec<Value> = top_tokens(id, position, self.top, vocab)
            .into_iter()
            .map(|(other, logprob)| self.triple(logprob, other))
            .collect();
        Value::Array(top)
    }

    fn triple(&self, logprob: f64, id: u32) -> Value {
        json!([logprob, id, self.text(id)])
    }

    fn text(&self, id: u32) -> Option<String> {
        self.with_text
            .then(|| self.tokenizer.decode(&[id], false).unwrap_or_default())
    }
}
