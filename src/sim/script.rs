//! Scripted outputs, so tests can make the model say a given text: `POST /sim/script` with
//! `{"match": "<substring of the decoded prompt>", "output": "<text>"}` adds a rule (later rules
//! win), `DELETE /sim/script` clears them. A request whose prompt contains a rule's `match`
//! generates exactly the tokens of its `output` (added tokens such as `<tool_call>` as their
//! ids), then the end-of-sequence token; everything else about the run is as for any request.

use std::sync::Mutex;

use serde::Deserialize;

use crate::tokenize::Tokenizer;

/// Rules kept at once; more is refused (a test suite needs a handful).
pub const MAX_RULES: usize = 256;
/// Tokens one scripted output may have.
pub const MAX_OUTPUT_TOKENS: usize = 8192;

#[derive(Debug, Deserialize)]
pub struct RuleRequest {
    #[serde(rename = "match")]
    pub matcher: String,
    pub output: String,
}

struct Rule {
    matcher: String,
    output_ids: Vec<u32>,
}

#[derive(Default)]
pub struct Scripts {
    rules: Mutex<Vec<Rule>>,
}

impl Scripts {
    /// Encodes `output` with the sim's tokenizer and adds the rule; returns how many rules there
    /// are now.
    pub fn add(&self, tokenizer: &Tokenizer, rule: RuleRequest) -> Result<usize, String> {
        let output_ids = tokenizer
            .encode(&rule.output, false)
            .map_err(|e| e.to_string())?;
        if output_ids.is_empty() || output_ids.len() > MAX_OUTPUT_TOKENS {
            return Err(format!(
                "output must encode to 1 to {MAX_OUTPUT_TOKENS} tokens, got {}",
                output_ids.len()
            ));
        }
        let mut rules = self.lock();
        if rules.len() >= MAX_RULES {
            return Err(format!(
                "at most {MAX_RULES} rules; DELETE /sim/script clears them"
            ));
        }
        rules.push(Rule {
            matcher: rule.matcher,
            output_ids,
        });
        Ok(rules.len())
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The scripted output ids for this prompt, if a rule matches (the last one that does).
    /// The prompt is decoded only while there are rules.
    pub fn output_for(&self, tokenizer: &Tokenizer, prompt: &[u32]) -> Option<Vec<u32>> {
        let rules = self.lock();
        if rules.is_empty() {
            return None;
        }
        let text = tokenizer.decode(prompt, false).ok()?;
        rules
            .iter()
            .rev()
            .find(|r| text.contains(r.matcher.as_str()))
            .map(|r| r.output_ids.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }
}
