//! Reasoning parsers: a reasoning model's text split into its reasoning (`reasoning_content`)
//! and its answer (`content`), as SGLang's `--reasoning-parser` does. A pure text layer:
//! [`kind`] names the parsers and says how one request's output starts, [`whole`] splits a
//! finished text (non-streaming answers), [`incremental`] splits a stream under any chunking;
//! gpt-oss's Harmony channels are read by [`harmony`] and split by [`harmony_split`].

pub mod harmony;
pub mod harmony_split;
pub mod incremental;
pub mod kind;
pub mod whole;

pub use incremental::{held_prefix_len, StreamSplitter};
pub use kind::{Format, ParserKind};
pub use whole::{python_strip, split_whole};

/// Text split into reasoning and content (either may be empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}
