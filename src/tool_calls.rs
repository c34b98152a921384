//! Tool-call parsers: a model's chat text read into OpenAI `tool_calls` and the content around
//! them, as SGLang's `--tool-call-parser` does. A pure text layer: [`kind`] names the parsers,
//! one module per family reads its format ([`tagged`], [`llama3`], [`mistral`],
//! [`pythonic`], [`deepseek`], [`kimi_k2`], [`qwen3_coder`], [`gpt_oss`], [`glm45`]), [`detect`] picks one from the
//! chat template or the model's name, [`whole`] parses a finished text with the chosen family (non-streaming
//! answers, and the end of a stream), [`incremental`] streams the content before the first
//! call under any chunking; arguments are written as SGLang's `json.dumps` writes them
//! (`tokenize::python_json_dumps`).

pub mod deepseek;
pub mod detect;
pub mod glm45;
pub mod gpt_oss;
pub mod incremental;
pub mod kimi_k2;
pub mod kind;
pub mod llama3;
pub mod mistral;
pub mod python_literal;
pub mod pythonic;
pub mod qwen3_coder;
pub mod tagged;
pub mod whole;

pub use incremental::StreamParser;
pub use kind::ParserKind;
pub use whole::parse_whole;

/// One call the model made: a function of the request's `tools` and its arguments (a JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// A text read for tool calls: the content (may be empty) and the calls, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

/// How one request's output is read: the parser and the names of the request's tools (a call
/// to any other name is dropped, as SGLang does by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub kind: ParserKind,
    pub tool_names: Vec<String>,
    /// Each tool's parameter schema, in the order of `tool_names`, for a parser that types
    /// arguments by it ([`ParserKind::reads_schemas`]); empty for the others.
    pub parameters: Vec<Option<serde_json::Map<String, serde_json::Value>>>,
}

impl Reading {
    /// The parameter schema of the first tool named `name`.
    pub fn parameters_of(&self, name: &str) -> Option<&serde_json::Map<String, serde_json::Value>> {
        let at = self.tool_names.iter().position(|n| n == name)?;
        self.parameters.get(at)?.as_ref()
    }
}

/// Where a family's calls start in a text streamed so far: at a byte, or not yet, the content
/// up to a byte being certain (what follows may still turn out to open a call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    At(usize),
    Clear(usize),
}

impl Start {
    /// The first of `markers` in `text`; else clear up to a tail that may begin one of them.
    pub fn first_of(text: &str, markers: &[&str]) -> Start {
        match markers.iter().filter_map(|m| text.find(m)).min() {
            Some(at) => Start::At(at),
            None => Start::Clear(
                text.len()
                    - markers
                        .iter()
                        .map(|m| crate::reasoning::held_prefix_len(text, m))
                        .max()
                        .unwrap_or(0),
            ),
        }
    }
}
