//! What a client sees of a generation, per API: the events of a stream and the one object of a
//! whole answer. `stream` and `collect` drive a generation through the parsers (reasoning, tool
//! calls) and hand the pieces to a [`Grammar`]; each API (OpenAI chat and completions in
//! `format`, Anthropic Messages in `messages`, OpenAI Responses in `responses`) is one
//! implementation, so every route shares one relay loop.

use crate::error::GatewayError;
use crate::protocol::openai::logprobs::TokenLogprob;
use crate::protocol::openai::Usage;
use crate::protocol::sglang::FinishReason;
use crate::tool_calls::ToolCall;

/// How a generation ended, as the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// OpenAI's `finish_reason`: `stop`, `length`, `abort`, or `tool_calls` for a generation
    /// that stopped on its own after making calls.
    pub reason: &'static str,
    /// The stop string that ended it, when one did (not a stop token).
    pub stop_string: Option<String>,
}

impl Ending {
    pub fn new(finish: &FinishReason, called: bool) -> Ending {
        let stop_string = match finish {
            FinishReason::Stop {
                matched: Some(serde_json::Value::String(s)),
            } => Some(s.clone()),
            _ => None,
        };
        Ending {
            reason: super::collect::with_calls(finish.openai(), called),
            stop_string,
        }
    }

    /// A stream that ended without a finish reason from the worker (it cannot, but the client
    /// still gets a closed answer).
    pub fn stopped() -> Ending {
        Ending {
            reason: "stop",
            stop_string: None,
        }
    }
}

/// A whole answer, after the parsers: `reasoning` is set when a reasoning parser split it,
/// `calls` when a tool-call parser read it.
pub struct Whole<'a> {
    pub content: &'a str,
    pub reasoning: Option<&'a str>,
    pub calls: Option<&'a [ToolCall]>,
    pub ending: Ending,
    pub usage: Usage,
}

/// One API's output. The stream methods write into the caller's buffer: an event costs no
/// allocation of its own, and the events of one step go out as one write.
pub trait Grammar: Send + 'static {
    /// Before anything else, once the first token is in hand (`usage` has the prompt's counts).
    fn start(&mut self, out: &mut Vec<u8>, usage: &Usage);
    /// Reasoning split from the answer (only with a reasoning parser).
    fn reasoning(&mut self, out: &mut Vec<u8>, text: &str);
    /// Answer text. Without parsers it comes with the finish reason on the last step (it may be
    /// empty then); with them `finish` is `None` and the text is never empty.
    fn text(&mut self, out: &mut Vec<u8>, text: &str, finish: Option<&'static str>);
    /// The calls read from the answer, at its end.
    fn tool_calls(&mut self, out: &mut Vec<u8>, calls: &[ToolCall]);
    /// The closing events.
    fn finish(&mut self, out: &mut Vec<u8>, ending: &Ending, usage: &Usage);
    /// A failure after the stream started: the API's error event, and the stream ends without
    /// its closing events, so no client mistakes it for a complete answer.
    fn error(&mut self, out: &mut Vec<u8>, err: &GatewayError);
    /// A worker stream that ended without a finish reason (`Ok(None)` first): whatever closes it.
    fn cut(&mut self, out: &mut Vec<u8>, usage: &Usage);
    /// The whole answer as one JSON object.
    fn whole(self, answer: Whole<'_>) -> Vec<u8>;
    /// The logprobs of tokens whose text came or comes next (a stream: before each step's
    /// events; a whole answer: all of them before `whole`), when the request asked for them.
    fn logprobs(&mut self, _tokens: Vec<TokenLogprob>) {}
}

/// A grammar's SSE output read back as (event name, JSON data) pairs, for its tests.
#[cfg(test)]
pub(crate) fn sse_events(bytes: &[u8]) -> Vec<(String, serde_json::Value)> {
    let mut p = crate::stream::sse::SseParser::new(1 << 20);
    p.push(bytes);
    let mut out = Vec::new();
    while let Ok(Some(ev)) = p.next_event() {
        let v = serde_json::from_slice(&ev.data).unwrap();
        out.push((ev.event.clone().unwrap_or_default(), v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_matched_stop_string_is_the_ending_s_stop_string() {
        let stop = |matched| FinishReason::Stop { matched };
        let by_string = Ending::new(&stop(Some(json!("END"))), false);
        assert_eq!(by_string.stop_string.as_deref(), Some("END"));
        // A stop token (EOS) is matched by its id: no stop string.
        assert_eq!(
            Ending::new(&stop(Some(json!(151643))), false).stop_string,
            None
        );
        assert_eq!(Ending::new(&stop(None), true).reason, "tool_calls");
        let length = FinishReason::Length { length: Some(9) };
        assert_eq!(Ending::new(&length, true).reason, "length");
    }
}
