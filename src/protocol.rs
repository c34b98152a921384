//! Wire types: what clients send us (OpenAI) and what we exchange with SGLang workers.
//! No I/O here.

pub mod openai;
pub mod sampling;
pub mod sglang;
