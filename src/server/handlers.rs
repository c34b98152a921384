//! Inference handlers: thin wrappers that read the body, then hand over to [`dispatch`].

pub mod chat;
pub mod completions;
pub mod dispatch;
pub mod generate;
