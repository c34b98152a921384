//! Wire types: what clients send us (OpenAI, Anthropic) and what we exchange with SGLang workers
//! (JSON over HTTP, or SGLang's gRPC service). No I/O here.

pub mod anthropic;
pub mod grpc;
pub mod openai;
pub mod sampling;
pub mod sglang;
