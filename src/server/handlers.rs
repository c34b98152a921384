//! Inference handlers: thin wrappers that read the body, then hand over to [`dispatch`].

pub mod dispatch;
pub mod generate;
pub mod generate_grpc;
pub mod messages;
pub mod openai;
