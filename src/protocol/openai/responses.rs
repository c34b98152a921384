//! OpenAI Responses (`POST /v1/responses`, stateless): requests as clients send them, the
//! `response` object and stream events as the gateway answers them.

mod request;
mod response;

pub use request::*;
pub use response::*;
