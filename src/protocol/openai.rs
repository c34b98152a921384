//! OpenAI chat and completions: requests as clients send them (every documented field typed, so
//! a wrong type is a 400 here whether or not the gateway implements the field), responses and
//! stream chunks as we emit them.

pub mod logprobs;
mod prompt;
mod request;
mod response;
pub mod responses;
pub mod sampling_aside;
mod tools;

pub use prompt::Prompt;
pub use request::*;
pub use response::*;
pub use tools::*;
