//! Anthropic Messages output: the stream's event grammar (`message_start`, `ping`, per block
//! `content_block_start` / `content_block_delta` / `content_block_stop`, `message_delta`,
//! `message_stop`; `error` on a failure) and the whole `message` object. The blocks are kept as
//! they are streamed, so a stream joined is the whole answer.

use std::sync::Arc;

use serde_json::Value;

use super::grammar::{Ending, Grammar, Whole};
use crate::error::GatewayError;
use crate::protocol::anthropic::{
    error_kind, BlockDelta, ContentBlock, ErrorBody, Message, MessageDelta, StreamEvent, Usage,
};
use crate::protocol::openai;
use crate::stream::sse;
use crate::tool_calls::ToolCall;

pub struct MessagesFormat {
    /// `msg_<rid>`.
    id: String,
    rid: String,
    model: Arc<str>,
    blocks: Vec<ContentBlock>,
    /// The streamed block still open (its index in `blocks`).
    open: Option<usize>,
}

/// Anthropic's `stop_reason` for how the generation ended.
pub fn stop_reason(ending: &Ending) -> &'static str {
    match ending.reason {
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        _ if ending.stop_string.is_some() => "stop_sequence",
        _ => "end_turn",
    }
}

fn usage(u: &openai::Usage) -> Usage {
    Usage::new(
        u.prompt_tokens,
        u.completion_tokens,
        u.prompt_tokens_details.cached_tokens,
    )
}

impl MessagesFormat {
    pub fn new(rid: &str, model: Arc<str>) -> MessagesFormat {
        MessagesFormat {
            id: format!("msg_{rid}"),
            rid: rid.to_owned(),
            model,
            blocks: Vec::new(),
            open: None,
        }
    }

    fn event(out: &mut Vec<u8>, event: &StreamEvent<'_>) {
        sse::write_named_event(out, event.name(), event);
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some(index) = self.open.take() {
            Self::event(out, &StreamEvent::ContentBlockStop { index });
        }
    }

    /// The open block if it is of the kind `is`, else a new one (the previous closed).
    fn block(
        &mut self,
        out: &mut Vec<u8>,
        is: fn(&ContentBlock) -> bool,
        new: ContentBlock,
    ) -> usize {
        if let Some(i) = self.open.filter(|&i| self.blocks.get(i).is_some_and(is)) {
            return i;
        }
        self.close(out);
        let index = self.blocks.len();
        Self::event(
            out,
            &StreamEvent::ContentBlockStart {
                index,
                content_block: &new,
            },
        );
        self.blocks.push(new);
        self.open = Some(index);
        index
    }

    fn tool_use(&self, call: &ToolCall) -> ContentBlock {
        let n = self
            .blocks
            .iter()
            .filter(|b| matches!(b, ContentBlock::ToolUse { .. }))
            .count();
        ContentBlock::ToolUse {
            id: format!("toolu_{}_{n}", self.rid),
            name: call.name.clone(),
            // The parsers give an object's JSON text; anything else is kept as its text.
            input: serde_json::from_str(&call.arguments)
                .unwrap_or_else(|_| Value::from(call.arguments.as_str())),
        }
    }

    fn message<'a>(&'a self, ending: Option<&'a Ending>, usage: Usage) -> Message<'a> {
        Message {
            id: &self.id,
            kind: "message",
            role: "assistant",
            model: &self.model,
            content: &self.blocks,
            stop_reason: ending.map(stop_reason),
            stop_sequence: ending.and_then(|e| e.stop_string.as_deref()),
            usage,
        }
    }
}

impl Grammar for MessagesFormat {
    fn start(&mut self, out: &mut Vec<u8>, u: &openai::Usage) {
        let message = self.message(None, usage(u));
        Self::event(out, &StreamEvent::MessageStart { message });
        Self::event(out, &StreamEvent::Ping);
    }

    fn reasoning(&mut self, out: &mut Vec<u8>, text: &str) {
        let index = self.block(
            out,
            |b| matches!(b, ContentBlock::Thinking { .. }),
            ContentBlock::Thinking {
                thinking: String::new(),
                signature: String::new(),
            },
        );
        if let Some(ContentBlock::Thinking { thinking, .. }) = self.blocks.get_mut(index) {
            thinking.push_str(text);
        }
        let delta = BlockDelta::ThinkingDelta { thinking: text };
        Self::event(out, &StreamEvent::ContentBlockDelta { index, delta });
    }

    fn text(&mut self, out: &mut Vec<u8>, text: &str, _finish: Option<&'static str>) {
        if text.is_empty() {
            return;
        }
        let index = self.block(
            out,
            |b| matches!(b, ContentBlock::Text { .. }),
            ContentBlock::Text {
                text: String::new(),
            },
        );
        if let Some(ContentBlock::Text { text: t }) = self.blocks.get_mut(index) {
            t.push_str(text);
        }
        let delta = BlockDelta::TextDelta { text };
        Self::event(out, &StreamEvent::ContentBlockDelta { index, delta });
    }

    /// Each call a block of its own: opened with an empty `input`, which its one
    /// `input_json_delta` fills.
    fn tool_calls(&mut self, out: &mut Vec<u8>, calls: &[ToolCall]) {
        self.close(out);
        for call in calls {
            let index = self.blocks.len();
            let block = self.tool_use(call);
            if let ContentBlock::ToolUse { id, name, .. } = &block {
                let opening = ContentBlock::ToolUse {
                    id: id.clone(),
                    name: name.clone(),
                    input: Value::Object(serde_json::Map::new()),
                };
                Self::event(
                    out,
                    &StreamEvent::ContentBlockStart {
                        index,
                        content_block: &opening,
                    },
                );
            }
            let delta = BlockDelta::InputJsonDelta {
                partial_json: &call.arguments,
            };
            Self::event(out, &StreamEvent::ContentBlockDelta { index, delta });
            Self::event(out, &StreamEvent::ContentBlockStop { index });
            self.blocks.push(block);
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>, ending: &Ending, u: &openai::Usage) {
        self.close(out);
        let delta = MessageDelta {
            stop_reason: stop_reason(ending),
            stop_sequence: ending.stop_string.as_deref(),
        };
        Self::event(
            out,
            &StreamEvent::MessageDelta {
                delta,
                usage: usage(u),
            },
        );
        Self::event(out, &StreamEvent::MessageStop);
    }

    fn error(&mut self, out: &mut Vec<u8>, err: &GatewayError) {
        let (_, kind) = error_kind(err.status().as_u16());
        let message = err.body().error.message;
        sse::write_named_event(out, "error", &ErrorBody::new(kind, &message));
    }

    fn cut(&mut self, out: &mut Vec<u8>, usage: &openai::Usage) {
        self.finish(out, &Ending::stopped(), usage);
    }

    fn whole(mut self, a: Whole<'_>) -> Vec<u8> {
        if let Some(r) = a.reasoning.filter(|r| !r.is_empty()) {
            self.blocks.push(ContentBlock::Thinking {
                thinking: r.to_owned(),
                signature: String::new(),
            });
        }
        if !a.content.is_empty() {
            self.blocks.push(ContentBlock::Text {
                text: a.content.to_owned(),
            });
        }
        for call in a.calls.unwrap_or_default() {
            let block = self.tool_use(call);
            self.blocks.push(block);
        }
        serde_json::to_vec(&self.message(Some(&a.ending), usage(&a.usage))).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::grammar::sse_events as events;

    #[test]
    fn a_stream_follows_the_grammar_and_joins_to_the_whole_answer() {
        let usage = openai::Usage::new(10, 3, 4);
        let call = ToolCall {
            name: "w".into(),
            arguments: r#"{"c": "P"}"#.into(),
        };
        let ending = Ending {
            reason: "tool_calls",
            stop_string: None,
        };
        let mut f = MessagesFormat::new("r", "m".into());
        let mut out = Vec::new();
        f.start(&mut out, &usage);
        f.reasoning(&mut out, "hm");
        f.reasoning(&mut out, "m");
        f.text(&mut out, "Hi", None);
        f.text(&mut out, "", Some("stop"));
        f.tool_calls(&mut out, std::slice::from_ref(&call));
        f.finish(&mut out, &ending, &usage);
        let evs = events(&out);
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (name, v) in &evs {
            assert_eq!(v["type"], name.as_str(), "{v}");
        }
        assert_eq!(evs[0].1["message"]["usage"]["input_tokens"], 6);
        assert_eq!(evs[0].1["message"]["usage"]["cache_read_input_tokens"], 4);
        assert_eq!(evs[3].1["delta"]["type"], "thinking_delta");
        assert_eq!(evs[9].1["content_block"]["input"], serde_json::json!({}));
        assert_eq!(evs[10].1["delta"]["partial_json"], r#"{"c": "P"}"#);
        assert_eq!(evs[12].1["delta"]["stop_reason"], "tool_use");
        let whole = MessagesFormat::new("r", "m".into()).whole(Whole {
            content: "Hi",
            reasoning: Some("hmm"),
            calls: Some(&[call]),
            ending,
            usage,
        });
        let whole: Value = serde_json::from_slice(&whole).unwrap();
        assert_eq!(whole["content"], serde_json::to_value(&f.blocks).unwrap());
        assert_eq!(whole["content"][2]["input"], serde_json::json!({"c": "P"}));
        assert_eq!(whole["stop_reason"], "tool_use");
    }

    #[test]
    fn stop_reasons() {
        let e = |reason, stop: Option<&str>| Ending {
            reason,
            stop_string: stop.map(str::to_owned),
        };
        assert_eq!(stop_reason(&e("stop", None)), "end_turn");
        assert_eq!(stop_reason(&e("stop", Some("END"))), "stop_sequence");
        assert_eq!(stop_reason(&e("length", None)), "max_tokens");
        assert_eq!(stop_reason(&e("tool_calls", None)), "tool_use");
    }
}
