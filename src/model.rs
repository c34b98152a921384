//! The model this gateway serves: the name clients send, the tokenizer (with its chat template)
//! the context length and its reasoning and tool-call parsers. What `prepare` needs and nothing more.

use std::sync::Arc;

use crate::reasoning::ParserKind;
use crate::tokenize::Tokenizer;

pub struct Model {
    /// The name answers carry and `/v1/models` lists first.
    pub name: Arc<str>,
    /// Other names clients may send as `model` (the tokenizer folder's, when the served name came
    /// from the workers).
    pub aliases: Vec<Arc<str>>,
    pub tokenizer: Arc<Tokenizer>,
    pub context_length: usize,
    /// How its chat output splits into reasoning and content (`--reasoning-parser`).
    pub reasoning_parser: Option<ParserKind>,
    /// How its chat output is read for tool calls (`--tool-call-parser`).
    pub tool_call_parser: Option<crate::tool_calls::ParserKind>,
}

impl Model {
    /// Whether a request naming `model` is for this model.
    pub fn serves(&self, model: &str) -> bool {
        *self.name == *model || self.aliases.iter().any(|a| **a == *model)
    }

    /// Bytes of prompt text that can fit the context at all: more cannot, whatever it tokenizes
    /// to (`None` where the tokenizer gives no bound).
    pub fn max_prompt_text_bytes(&self) -> Option<usize> {
        self.tokenizer
            .max_bytes_per_token()
            .map(|b| b.saturating_mul(self.context_length))
    }
}
