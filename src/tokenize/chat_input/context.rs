//! The variables a chat template is rendered with, looked up by name when the template reads
//! one: a map built per request (keys allocated, hashed and sorted, the special tokens
//! converted again) cost more than rendering a short conversation does.

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, Value};

use super::to_value;
use crate::tokenize::config::TokenizerConfig;

/// The tokenizer's special tokens as template variables (HF passes its special tokens map):
/// made once per tokenizer.
#[derive(Debug)]
pub(crate) struct SpecialTokenVars(Vec<(&'static str, Value)>);

impl SpecialTokenVars {
    pub(crate) fn new(cfg: &TokenizerConfig) -> Self {
        let mut vars = Vec::new();
        for (name, tok) in [
            ("bos_token", &cfg.bos_token),
            ("eos_token", &cfg.eos_token),
            ("unk_token", &cfg.unk_token),
            ("pad_token", &cfg.pad_token),
        ] {
            if let Some(t) = tok {
                vars.push((name, Value::from(t.as_str())));
            }
        }
        if !cfg.additional_special_tokens.is_empty() {
            vars.push((
                "additional_special_tokens",
                to_value(&cfg.additional_special_tokens),
            ));
        }
        SpecialTokenVars(vars)
    }

    fn get(&self, key: &str) -> Option<Value> {
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }
}

/// One render's variables. As in HF: the special tokens first, `chat_template_kwargs` over
/// them, and the fixed arguments over both (they cannot be overridden).
#[derive(Debug)]
pub(super) struct TemplateContext {
    messages: Value,
    tools: Value,
    add_generation_prompt: bool,
    /// `chat_template_kwargs`, sorted by name (a client may send many: looked up by halving).
    extra: Vec<(String, Value)>,
    specials: Arc<SpecialTokenVars>,
}

impl TemplateContext {
    /// `extra`: `chat_template_kwargs` (names unique).
    pub(super) fn new(
        messages: Value,
        tools: Value,
        add_generation_prompt: bool,
        mut extra: Vec<(String, Value)>,
        specials: Arc<SpecialTokenVars>,
    ) -> Self {
        extra.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        TemplateContext {
            messages,
            tools,
            add_generation_prompt,
            extra,
            specials,
        }
    }
}

const FIXED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

impl Object for TemplateContext {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.get_value_by_str(key.as_str()?)
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        match key {
            "messages" => Some(self.messages.clone()),
            "tools" => Some(self.tools.clone()),
            "documents" => Some(Value::from(())),
            "add_generation_prompt" => Some(Value::from(self.add_generation_prompt)),
            _ => match self.extra.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
                Ok(i) => self.extra.get(i).map(|(_, v)| v.clone()),
                Err(_) => self.specials.get(key),
            },
        }
    }

    /// Every variable's name, sorted (as the map it replaces iterated).
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let mut keys: Vec<&str> = FIXED.to_vec();
        keys.extend(self.extra.iter().map(|(k, _)| k.as_str()));
        keys.extend(self.specials.0.iter().map(|(k, _)| *k));
        keys.sort_unstable();
        keys.dedup();
        Enumerator::Values(keys.into_iter().map(Value::from).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::chat_template::ChatTemplate;

    fn context(extra: Vec<(String, Value)>) -> Value {
        let cfg = TokenizerConfig {
            bos_token: Some("<s>".into()),
            eos_token: Some("</s>".into()),
            additional_special_tokens: vec!["<a>".into(), "<b>".into()],
            ..Default::default()
        };
        Value::from_object(TemplateContext::new(
            Value::from(vec![Value::from("m")]),
            Value::from(()),
            true,
            extra,
            Arc::new(SpecialTokenVars::new(&cfg)),
        ))
    }

    fn render(src: &str, ctx: Value) -> String {
        ChatTemplate::new(src.to_owned(), None)
            .and_then(|t| t.render(ctx, false, 0))
            .unwrap()
    }

    #[test]
    fn kwargs_over_special_tokens_and_fixed_arguments_over_both() {
        let extra = vec![
            ("eos_token".to_owned(), Value::from("<end>")),
            ("messages".to_owned(), Value::from("overridden")),
            ("enable_thinking".to_owned(), Value::from(false)),
        ];
        let src = "{{ bos_token }}|{{ eos_token }}|{{ messages[0] }}|{{ enable_thinking }}|\
                   {{ additional_special_tokens | join(',') }}|{{ add_generation_prompt }}|\
                   {{ tools is none }}|{{ documents is none }}|{{ unk_token is defined }}";
        assert_eq!(
            render(src, context(extra)),
            "<s>|<end>|m|False|<a>,<b>|True|True|True|False"
        );
    }

    #[test]
    fn enumerates_every_name_once_sorted() {
        let extra = vec![("eos_token".to_owned(), Value::from("<end>"))];
        let names: Vec<String> = context(extra)
            .try_iter()
            .unwrap()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(
            names.join(","),
            "add_generation_prompt,additional_special_tokens,bos_token,documents,eos_token,messages,tools"
        );
    }
}
