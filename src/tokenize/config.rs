//! The parts of `tokenizer_config.json` / `generation_config.json` we use.
//! Parsed leniently: these files vary a lot between models and versions.

use serde_json::Value as Json;

/// Larger declared context lengths are placeholders (HF writes 1e30).
const MAX_SANE_CONTEXT: f64 = 1e9;

#[derive(Debug, Clone, Default)]
pub(crate) struct TokenizerConfig {
    pub chat_template: Option<String>,
    /// HF's named `tool_use` template, used when tools are given.
    pub tool_use_template: Option<String>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub pad_token: Option<String>,
    pub additional_special_tokens: Vec<String>,
    pub model_max_length: Option<usize>,
    pub generation_eos_ids: Vec<u32>,
}

/// A special token is written either as a string or as an AddedToken
/// object `{"content": "...", ...}`.
fn token_str(v: Option<&Json>) -> Option<String> {
    match v? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

impl TokenizerConfig {
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, String> {
        let v: Json = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let obj = v
            .as_object()
            .ok_or_else(|| "tokenizer_config.json is not a JSON object".to_string())?;
        let mut cfg = TokenizerConfig {
            bos_token: token_str(obj.get("bos_token")),
            eos_token: token_str(obj.get("eos_token")),
            unk_token: token_str(obj.get("unk_token")),
            pad_token: token_str(obj.get("pad_token")),
            ..TokenizerConfig::default()
        };
        if let Some(Json::Array(list)) = obj.get("additional_special_tokens") {
            cfg.additional_special_tokens =
                list.iter().filter_map(|t| token_str(Some(t))).collect();
        }
        cfg.model_max_length = obj
            .get("model_max_length")
            .and_then(Json::as_f64)
            .filter(|n| n.is_finite() && *n >= 1.0 && *n <= MAX_SANE_CONTEXT)
            .map(|n| n as usize);
        match obj.get("chat_template") {
            Some(Json::String(s)) => cfg.chat_template = Some(s.clone()),
            // Newer HF form: [{"name": "default", "template": "..."}, ...].
            Some(Json::Array(named)) => {
                let find = |name: &str| {
                    named.iter().find_map(|t| {
                        (t.get("name")?.as_str()? == name)
                            .then(|| t.get("template")?.as_str().map(str::to_owned))
                            .flatten()
                    })
                };
                cfg.chat_template = find("default").or_else(|| {
                    named
                        .first()
                        .and_then(|t| t.get("template")?.as_str().map(str::to_owned))
                });
                cfg.tool_use_template = find("tool_use");
            }
            _ => {}
        }
        Ok(cfg)
    }

    /// `eos_token_id` of `generation_config.json`: an int or a list.
    pub(crate) fn add_generation_config(&mut self, bytes: &[u8]) -> Result<(), String> {
        let v: Json = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let to_id = |x: &Json| x.as_u64().and_then(|n| u32::try_from(n).ok());
        match v.get("eos_token_id") {
            Some(Json::Array(ids)) => {
                self.generation_eos_ids = ids.iter().filter_map(to_id).collect()
            }
            Some(x) => self.generation_eos_ids = to_id(x).into_iter().collect(),
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_token_forms_templates_and_lengths() {
        let cfg = TokenizerConfig::parse(
            br#"{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
                "model_max_length": 1000000000000000019884624838656,
                "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}"#,
        )
        .unwrap();
        assert_eq!(cfg.bos_token.as_deref(), Some("<s>"));
        assert_eq!(cfg.eos_token.as_deref(), Some("</s>"));
        assert_eq!(cfg.model_max_length, None);
        assert_eq!(cfg.chat_template.as_deref(), Some("D"));
        assert_eq!(cfg.tool_use_template.as_deref(), Some("T"));

        let mut cfg = TokenizerConfig::parse(br#"{"model_max_length": 8192}"#).unwrap();
        assert_eq!(cfg.model_max_length, Some(8192));
        cfg.add_generation_config(br#"{"eos_token_id": [2, 7]}"#)
            .unwrap();
        assert_eq!(cfg.generation_eos_ids, vec![2, 7]);
        cfg.add_generation_config(br#"{"eos_token_id": 5}"#)
            .unwrap();
        assert_eq!(cfg.generation_eos_ids, vec![5]);
        assert!(TokenizerConfig::parse(b"[1]").is_err());
    }
}
