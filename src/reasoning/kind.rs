//! The parsers by name (`--reasoning-parser`), their tags, and whether a request's output
//! starts inside the reasoning — SGLang 0.5.9's `ReasoningParser.DetectorMap` and
//! `OpenAIServingChat._get_reasoning_from_request`, for the names shipped here.

use clap::ValueEnum;
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ParserKind {
    /// `<think>…</think>`; the output is reasoning until `</think>` (R1 omits the opening tag).
    #[value(name = "deepseek-r1")]
    DeepseekR1,
    /// `<think>…</think>`; reasoning from the start unless `enable_thinking` is false.
    #[value(name = "qwen3")]
    Qwen3,
    /// `<think>…</think>`; always reasoning from the start (Qwen3 *-Thinking-2507).
    #[value(name = "qwen3-thinking")]
    Qwen3Thinking,
    /// `◁think▷…◁/think▷`; reasoning only inside the tags.
    #[value(name = "kimi")]
    Kimi,
    /// GLM-4.5: as `qwen3`.
    #[value(name = "glm45")]
    Glm45,
    /// DeepSeek V3.1/V3.2: `<think>…</think>`; reasoning from the start only with `thinking: true`.
    #[value(name = "deepseek-v3")]
    DeepseekV3,
    /// Kimi K2 Thinking: `<think>…</think>`; reasoning from the start unless `thinking` is false.
    #[value(name = "kimi_k2")]
    KimiK2,
    /// gpt-oss: Harmony channels; `analysis` is the reasoning, always read.
    #[value(name = "gpt-oss")]
    GptOss,
}

/// How one request's output is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    pub start: &'static str,
    pub end: &'static str,
    /// The text is reasoning before any tag (SGLang's `force_reasoning`).
    pub starts_in_reasoning: bool,
    /// Harmony channels rather than two tags (`gpt-oss`); the tags above are unused.
    pub harmony: bool,
}

impl ParserKind {
    pub fn name(self) -> &'static str {
        match self {
            ParserKind::DeepseekR1 => "deepseek-r1",
            ParserKind::Qwen3 => "qwen3",
            ParserKind::Qwen3Thinking => "qwen3-thinking",
            ParserKind::Kimi => "kimi",
            ParserKind::Glm45 => "glm45",
            ParserKind::DeepseekV3 => "deepseek-v3",
            ParserKind::KimiK2 => "kimi_k2",
            ParserKind::GptOss => "gpt-oss",
        }
    }

    /// The format of one request's output, given its `chat_template_kwargs`.
    pub fn format(self, chat_template_kwargs: Option<&Map<String, Value>>) -> Format {
        let (start, end) = match self {
            ParserKind::Kimi => ("◁think▷", "◁/think▷"),
            _ => ("<think>", "</think>"),
        };
        let flag = |key: &str| chat_template_kwargs.and_then(|k| k.get(key));
        let starts_in_reasoning = match self {
            // SGLang's DeepSeek-R1 detector ignores the request; Kimi's never starts inside.
            ParserKind::DeepseekR1 | ParserKind::Qwen3Thinking | ParserKind::GptOss => true,
            ParserKind::Kimi => false,
            // Thinking by default; only a literal `enable_thinking: false` turns it off.
            ParserKind::Qwen3 | ParserKind::Glm45 => {
                flag("enable_thinking") != Some(&Value::Bool(false))
            }
            ParserKind::KimiK2 => flag("thinking") != Some(&Value::Bool(false)),
            // Off by default: only a literal `thinking: true` turns it on.
            ParserKind::DeepseekV3 => flag("thinking") == Some(&Value::Bool(true)),
        };
        Format {
            start,
            end,
            starts_in_reasoning,
            harmony: self == ParserKind::GptOss,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kwargs(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn enable_thinking_false_alone_turns_qwen3_reasoning_off() {
        for kind in [ParserKind::Qwen3, ParserKind::Glm45] {
            assert!(kind.format(None).starts_in_reasoning);
            assert!(kind.format(Some(&kwargs(json!({})))).starts_in_reasoning);
            assert!(
                kind.format(Some(&kwargs(json!({"enable_thinking": true}))))
                    .starts_in_reasoning
            );
            // SGLang compares with `is not False`: 0 or "false" do not count.
            assert!(
                kind.format(Some(&kwargs(json!({"enable_thinking": 0}))))
                    .starts_in_reasoning
            );
            assert!(
                !kind
                    .format(Some(&kwargs(json!({"enable_thinking": false}))))
                    .starts_in_reasoning
            );
        }
        let off = kwargs(json!({"enable_thinking": false}));
        assert!(
            ParserKind::Qwen3Thinking
                .format(Some(&off))
                .starts_in_reasoning
        );
        assert!(
            ParserKind::DeepseekR1
                .format(Some(&off))
                .starts_in_reasoning
        );
        assert!(!ParserKind::Kimi.format(None).starts_in_reasoning);
        let thinking = |v: Value| kwargs(json!({ "thinking": v }));
        assert!(!ParserKind::DeepseekV3.format(None).starts_in_reasoning);
        assert!(
            ParserKind::DeepseekV3
                .format(Some(&thinking(json!(true))))
                .starts_in_reasoning
        );
        assert!(ParserKind::KimiK2.format(None).starts_in_reasoning);
        assert!(
            !ParserKind::KimiK2
                .format(Some(&thinking(json!(false))))
                .starts_in_reasoning
        );
    }

    #[test]
    fn names_are_the_flag_values() {
        for kind in ParserKind::value_variants() {
            let v = kind.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(v.as_deref(), Some(kind.name()));
        }
    }
}
