//! Wire types: what clients send us (OpenAI, Anthropic) and what we exchange with SGLang workers.
//! No I/O here.

pub mod anthropic;
pub mod openai;
pub mod sampling;
pub mod sglang;
