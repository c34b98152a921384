//! Anthropic Messages (`POST /v1/messages`): requests as clients send them, the `message`
//! object, stream events and errors as the gateway answers them.

mod request;
mod response;

pub use request::*;
pub use response::*;
