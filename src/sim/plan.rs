//! What a simulated request will generate, decided up front from its prompt and sampling
//! parameters: the engine only decides *when* each token appears.

use std::hash::{Hash, Hasher};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use super::vocab::OutputVocab;
use crate::protocol::sglang::{FinishReason, SamplingParams};
use crate::tokenize::Tokenizer;

/// SGLang's `/generate` default when `max_new_tokens` is not given.
pub const DEFAULT_MAX_NEW_TOKENS: u32 = 128;

#[derive(Debug)]
pub struct Plan {
    pub output_ids: Vec<u32>,
    /// The full visible text, already cut at a matched stop string.
    pub text: String,
    /// `ends[k]` = bytes of `text` visible once `k + 1` tokens exist.
    ends: Vec<usize>,
    pub finish: FinishReason,
}

impl Plan {
    /// `eos_probability`: chance per token that the model ends on its own (unless `ignore_eos`).
    pub fn new(
        vocab: &OutputVocab,
        prompt: &[u32],
        params: &SamplingParams,
        eos_probability: f64,
    ) -> Plan {
        let max_new = params.max_new_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS) as usize;
        let seed = params
            .sampling_seed
            .map(|s| s as u64)
            .unwrap_or_else(|| hash_prompt(prompt));
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        let mut n = max_new;
        let mut finish = FinishReason::Length {
            length: Some(max_new as u32),
        };
        if !params.ignore_eos.unwrap_or(false) && eos_probability > 0.0 {
            if let Some(k) = (1..max_new).find(|_| rng.random_bool(eos_probability.min(1.0))) {
                n = k;
                finish = FinishReason::Stop {
                    matched: vocab.eos().map(Value::from),
                };
            }
        }
        let words = vocab.draw(rng.random(), n);
        let mut output_ids: Vec<u32> = words.iter().map(|&w| vocab.token_id(w)).collect();
        let mut ends = Vec::with_capacity(n);
        let mut text = String::with_capacity(n * 8);
        for (i, &w) in words.iter().enumerate() {
            if params.stop_token_ids.contains(&output_ids[i]) {
                output_ids.truncate(i + 1);
                ends.push(text.len());
                finish = FinishReason::Stop {
                    matched: Some(Value::from(output_ids[i])),
                };
                break;
            }
            text.push_str(vocab.piece(w));
            ends.push(text.len());
        }
        if matches!(finish, FinishReason::Stop { .. }) && output_ids.len() == n && n < max_new {
            // Ended by EOS: the EOS token itself is generated but has no text.
            if let Some(eos) = vocab.eos() {
                output_ids.push(eos);
                ends.push(text.len());
            }
        }
        let mut plan = Plan {
            output_ids,
            text,
            ends,
            finish,
        };
        plan.apply_stop_strings(&params.stop, params.no_stop_trim.unwrap_or(false));
        plan
    }

    /// A scripted output (`script`): exactly these ids, then the end-of-sequence token, as a
    /// model that says this text and stops; `max_new_tokens`, stop token ids and stop strings
    /// apply as to any output.
    pub fn scripted(
        tokenizer: &Tokenizer,
        vocab: &OutputVocab,
        mut ids: Vec<u32>,
        params: &SamplingParams,
    ) -> Plan {
        let max_new = params.max_new_tokens.unwrap_or(DEFAULT_MAX_NEW_TOKENS) as usize;
        let mut finish = FinishReason::Stop {
            matched: vocab.eos().map(Value::from),
        };
        let mut stop_token = vocab.eos();
        ids.extend(vocab.eos());
        if ids.len() > max_new {
            ids.truncate(max_new);
            finish = FinishReason::Length {
                length: Some(max_new as u32),
            };
            stop_token = None;
        }
        if let Some(i) = ids.iter().position(|t| params.stop_token_ids.contains(t)) {
            ids.truncate(i + 1);
            finish = FinishReason::Stop {
                matched: Some(Value::from(ids[i])),
            };
            stop_token = Some(ids[i]);
        }
        // The token that stopped the model has no text.
        let with_text = match stop_token {
            Some(t) if ids.last() == Some(&t) => ids.len() - 1,
            _ => ids.len(),
        };
        let skip = params.skip_special_tokens.unwrap_or(true);
        let decode = |n: usize| tokenizer.decode(&ids[..n], skip).unwrap_or_default();
        let text = decode(with_text);
        // What is visible after each token: the part of the final text its prefix decodes to
        // (a partial character shows once it is whole).
        let mut ends = Vec::with_capacity(ids.len());
        let mut end = 0;
        for k in 1..=ids.len() {
            let prefix = decode(k.min(with_text));
            let mut common = prefix
                .bytes()
                .zip(text.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            while !text.is_char_boundary(common) {
                common -= 1;
            }
            end = end.max(common);
            ends.push(end);
        }
        let mut plan = Plan {
            output_ids: ids,
            text,
            ends,
            finish,
        };
        plan.apply_stop_strings(&params.stop, params.no_stop_trim.unwrap_or(false));
        plan
    }

    fn apply_stop_strings(&mut self, stops: &[String], no_trim: bool) {
        let Some((start, stop)) = stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.text.find(s.as_str()).map(|i| (i, s)))
            .min_by_key(|(i, _)| *i)
        else {
            return;
        };
        let end = start + stop.len();
        let last = self
            .ends
            .iter()
            .position(|&e| e >= end)
            .unwrap_or(self.ends.len() - 1);
        self.output_ids.truncate(last + 1);
        self.ends.truncate(last + 1);
        let visible = if no_trim { end } else { start };
        self.text.truncate(visible);
        for e in &mut self.ends {
            *e = (*e).min(visible);
        }
        self.finish = FinishReason::Stop {
            matched: Some(Value::from(stop.clone())),
        };
    }

    pub fn len(&self) -> usize {
        self.output_ids.len()
    }

    /// A prefill-only plan (`max_new_tokens: 0`).
    pub fn is_empty(&self) -> bool {
        self.output_ids.is_empty()
    }

    /// The text visible once `produced` tokens exist. While a stop string could still be forming
    /// it is held back, as SGLang does, so no chunk ever shows part of it.
    pub fn visible(&self, produced: usize) -> &str {
        if produced == 0 {
            return "";
        }
        &self.text[..self.ends[(produced - 1).min(self.ends.len() - 1)]]
    }
}

pub(super) fn hash_prompt(prompt: &[u32]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    prompt.hash(&mut h);
    h.finish()
}
