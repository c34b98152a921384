//! The parsers by name (`--tool-call-parser`, SGLang 0.5.9's names for its detectors), and
//! the one each model family's chat template calls for when the flag is not given.

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ParserKind {
    /// Qwen 2.5 / Qwen 3: `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`, each call
    /// in its own block; a block that is not JSON is dropped, the others kept.
    #[value(name = "qwen25")]
    Qwen25,
    /// Hermes: `<tool_call>{…}</tool_call>` (newlines optional, the last block may be left
    /// open); one block that is not JSON makes the whole text content, with no calls.
    #[value(name = "hermes")]
    Hermes,
    /// Llama 3.x: `<|python_tag|>{"name": …, "parameters": …}` (or a text that starts with
    /// `{`), several calls separated by `;`; Python dicts are read too.
    #[value(name = "llama3")]
    Llama3,
    /// Mistral: `[TOOL_CALLS] [{"name": …, "arguments": …}, …]`, or the compact
    /// `[TOOL_CALLS]name[ARGS]{…}`.
    #[value(name = "mistral")]
    Mistral,
    /// Llama 4 and others: a Python list of calls, `[f(a=1), g(b="x")]`.
    #[value(name = "pythonic")]
    Pythonic,
    /// DeepSeek V3: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name`
    /// then the arguments in a JSON code block, `<｜tool▁call▁end｜>` per call.
    #[value(name = "deepseekv3")]
    DeepseekV3,
    /// DeepSeek V3.1: `<｜tool▁call▁begin｜>name<｜tool▁sep｜>{…}<｜tool▁call▁end｜>` inside
    /// `<｜tool▁calls▁begin｜>…<｜tool▁calls▁end｜>`.
    #[value(name = "deepseekv31")]
    DeepseekV31,
    /// Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.name:0`
    /// `<|tool_call_argument_begin|>{…}<|tool_call_end|>…`.
    #[value(name = "kimi_k2")]
    KimiK2,
    /// Qwen3-Coder: `<tool_call>\n<function=name>\n<parameter=key>\nvalue\n</parameter>…`,
    /// each value typed by the tool's parameter schema.
    #[value(name = "qwen3_coder")]
    Qwen3Coder,
    /// gpt-oss: Harmony, `<|start|>assistant<|channel|>commentary to=functions.name`
    /// `<|constrain|>json<|message|>{…}<|call|>`.
    #[value(name = "gpt-oss")]
    GptOss,
    /// GLM-4.5/4.6: `<tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>…`, each
    /// value fitted to the tool's parameter schema.
    #[value(name = "glm45")]
    Glm45,
    /// Not a flag value: a choice that forces a call (`tool_choice` `"required"` or a named
    /// function, Anthropic's `any` or `tool`). The worker is constrained to a JSON list of
    /// `{"name", "parameters"}` (SGLang's `get_json_schema_constraint`), read whole at the end.
    #[value(skip)]
    Forced,
}

impl ParserKind {
    /// Whether the parser types arguments by the tools' parameter schemas (so a [`Reading`]
    /// carries them).
    ///
    /// [`Reading`]: super::Reading
    pub fn reads_schemas(self) -> bool {
        matches!(self, ParserKind::Qwen3Coder | ParserKind::Glm45)
    }

    pub fn name(self) -> &'static str {
        match self {
            ParserKind::Qwen25 => "qwen25",
            ParserKind::Hermes => "hermes",
            ParserKind::Llama3 => "llama3",
            ParserKind::Mistral => "mistral",
            ParserKind::Pythonic => "pythonic",
            ParserKind::DeepseekV3 => "deepseekv3",
            ParserKind::DeepseekV31 => "deepseekv31",
            ParserKind::KimiK2 => "kimi_k2",
            ParserKind::Qwen3Coder => "qwen3_coder",
            ParserKind::GptOss => "gpt-oss",
            ParserKind::Glm45 => "glm45",
            ParserKind::Forced => "forced",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_flag_values() {
        for kind in ParserKind::value_variants() {
            let v = kind.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(v.as_deref(), Some(kind.name()));
        }
    }
}
