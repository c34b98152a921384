//! A model the gateway serves: the names clients send, the tokenizer (with its chat template),
//! the context length and its reasoning and tool-call parsers. What `prepare` needs and nothing
//! more (its workers are in `models::Served`).

use std::sync::{Arc, OnceLock};

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
    /// `Some` while the served name is open: no `--served-model-name` and no worker reported
    /// its model id at start-up. The first worker added later that reports one fills it, and
    /// that id is accepted as `model` from then on.
    pub late_name: Option<OnceLock<Arc<str>>>,
}

impl Model {
    /// Whether a request naming `model` is for this model.
    pub fn serves(&self, model: &str) -> bool {
        *self.name == *model
            || self.aliases.iter().any(|a| **a == *model)
            || self.learned_name().is_some_and(|n| **n == *model)
    }

    /// The model id a worker added after start-up reported, when the name was open.
    pub fn learned_name(&self) -> Option<&Arc<str>> {
        self.late_name.as_ref().and_then(OnceLock::get)
    }

    /// A worker added after start-up reported these model ids: while the name is open, the
    /// first becomes accepted (the id a client that talked to that worker directly sends).
    pub fn learn_name(&self, ids: &[String]) {
        let (Some(cell), Some(id)) = (&self.late_name, ids.first()) else {
            return;
        };
        if !id.is_empty() && cell.set(Arc::from(id.as_str())).is_ok() {
            tracing::info!(model = %self.name, learned = %id, "model id learned from a worker added at run time");
        }
    }

    /// Whether a worker that reports `id` as its model serves this one: one of its names, or
    /// the same after dropping a path and ASCII case (see [`same_model`]).
    pub fn answers_to(&self, id: &str) -> bool {
        self.serves(id)
            || std::iter::once(&self.name)
                .chain(&self.aliases)
                .any(|n| same_model(id, n))
    }

    /// Bytes of prompt text that can fit the context at all: more cannot, whatever it tokenizes
    /// to (`None` where the tokenizer gives no bound).
    pub fn max_prompt_text_bytes(&self) -> Option<usize> {
        self.tokenizer
            .max_bytes_per_token()
            .map(|b| b.saturating_mul(self.context_length))
    }
}

/// Whether a worker's model name names a model: equal, or equal after dropping a path
/// (`/models/Qwen2.5-7B` serves `Qwen2.5-7B`), ignoring ASCII case.
pub fn same_model(found: &str, ours: &str) -> bool {
    let base = |s: &str| {
        s.trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(s)
            .to_owned()
    };
    found.eq_ignore_ascii_case(ours) || base(found).eq_ignore_ascii_case(&base(ours))
}
