//! The parsers by name (`--tool-call-parser`) and their tags: SGLang 0.5.9's `qwen25`
//! (`Qwen25Detector`) and `hermes` (`HermesDetector`), the `<tool_call>{json}</tool_call>`
//! family.

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
    /// Not a flag value: a choice that forces a call (`tool_choice` `"required"` or a named
    /// function, Anthropic's `any` or `tool`). The worker is constrained to a JSON list of
    /// `{"name", "parameters"}` (SGLang's `get_json_schema_constraint`), read whole at the end.
    #[value(skip)]
    Forced,
}

impl ParserKind {
    pub fn name(self) -> &'static str {
        match self {
            ParserKind::Qwen25 => "qwen25",
            ParserKind::Hermes => "hermes",
            ParserKind::Forced => "forced",
        }
    }

    /// The text that opens a call: its presence is what makes a text a tool-call answer.
    pub fn start(self) -> &'static str {
        match self {
            ParserKind::Qwen25 => "<tool_call>\n",
            ParserKind::Hermes => "<tool_call>",
            // All of a forced output is the calls.
            ParserKind::Forced => "",
        }
    }

    /// The text that closes a call.
    pub fn end(self) -> &'static str {
        match self {
            ParserKind::Qwen25 => "\n</tool_call>",
            ParserKind::Hermes => "</tool_call>",
            ParserKind::Forced => "",
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
