//! Rendering a chat request with the model's template, as HF's `apply_chat_template` does.

mod context;

use std::sync::Arc;

pub(crate) use context::SpecialTokenVars;
use context::TemplateContext;
use minijinja::value::{Serde, Value};
use serde_json::{Map, Value as Json};

use super::{content, ChatTemplate, TokenizeError, Tokenizer};
use crate::protocol::openai::Tool;

/// What a chat template is rendered from (an OpenAI chat request, mostly).
#[derive(Debug, Clone, Copy)]
pub struct ChatTemplateInput<'a> {
    /// OpenAI-style messages (`role`, `content` as a string or text parts, ...).
    pub messages: &'a [Json],
    /// Tool definitions as the template should see them (HF: `tools`).
    pub tools: Option<&'a [Tool]>,
    pub add_generation_prompt: bool,
    /// `chat_template_kwargs`: extra template variables (e.g. `enable_thinking`).
    pub extra: Option<&'a Map<String, Json>>,
}

impl<'a> ChatTemplateInput<'a> {
    /// Messages only, with the generation prompt (the usual chat request).
    pub fn new(messages: &'a [Json]) -> Self {
        ChatTemplateInput {
            messages,
            tools: None,
            add_generation_prompt: true,
            extra: None,
        }
    }
}

/// Any serializable value as a template value (keeps map order).
fn to_value<T: serde::Serialize>(v: T) -> Value {
    Value::from(Serde(v))
}

impl Tokenizer {
    /// Render the chat template as HF's `apply_chat_template(tokenize=False)`
    /// does, with SGLang's message normalisation (see `content.rs`).
    pub fn apply_chat_template(
        &self,
        req: &ChatTemplateInput<'_>,
    ) -> Result<String, TokenizeError> {
        let (template, ctx, text_bytes) = self.template_context(req)?;
        template.render(ctx, req.tools.is_some(), text_bytes)
    }

    /// The split form of the template alone (`chat_template::concat`), without the original
    /// to fall back on: for tests that the split form is used and right.
    #[cfg(test)]
    pub(crate) fn apply_split_chat_template(
        &self,
        req: &ChatTemplateInput<'_>,
    ) -> Result<String, TokenizeError> {
        let (template, ctx, _) = self.template_context(req)?;
        template.render_split(ctx, req.tools.is_some())
    }

    /// The model's template, the variables to render `req` with, and the bytes of the
    /// messages' text.
    fn template_context(
        &self,
        req: &ChatTemplateInput<'_>,
    ) -> Result<(&ChatTemplate, Value, usize), TokenizeError> {
        let template = self
            .inner
            .template
            .as_ref()
            .ok_or_else(|| TokenizeError::Template("the model has no chat template".into()))?;
        let format = template.content_format();
        let mut messages = Vec::with_capacity(req.messages.len());
        let mut text_bytes = 0;
        for m in req.messages {
            let m = content::normalize_message(m, format)?;
            text_bytes += m.get("content").and_then(Json::as_str).map_or(0, str::len);
            messages.push(to_value(m.as_ref()));
        }

        let extra = req
            .extra
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), to_value(v)))
            .collect();
        let ctx = TemplateContext::new(
            Value::from(messages),
            req.tools.map_or(Value::from(()), to_value),
            req.add_generation_prompt,
            extra,
            Arc::clone(&self.inner.template_vars),
        );
        Ok((template, Value::from_object(ctx), text_bytes))
    }

    /// Template, then `encode(prompt, add_special_tokens=false)`, as SGLang
    /// does for chat requests (the template already holds BOS if needed).
    pub fn render_and_encode(
        &self,
        req: &ChatTemplateInput<'_>,
    ) -> Result<Vec<u32>, TokenizeError> {
        let prompt = self.apply_chat_template(req)?;
        self.encode(&prompt, false)
    }
}
