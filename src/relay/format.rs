//! OpenAI response objects for one request: chat or text completion, streamed or whole.

use std::cell::{Cell, OnceCell, RefCell};
use std::sync::Arc;

use serde_json::Value;

use super::grammar::{Ending, Grammar, Whole};
use crate::error::GatewayError;
use crate::protocol::openai::logprobs::{self, TokenLogprob};
use crate::protocol::openai::{
    ChatChunk, ChatChunkChoice, Delta, FunctionDelta, TextChoice, TextChunk, ToolCallDelta, Usage,
};
use crate::stream::sse;

mod content_frame;
mod whole;
use crate::tool_calls::ToolCall;
use content_frame::ContentFrame;
pub use whole::WholeChoice;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

pub struct Formatter {
    pub kind: Kind,
    /// `chatcmpl-<rid>` or `cmpl-<rid>`.
    pub id: String,
    pub created: u64,
    pub model: Arc<str>,
    /// A stream ends with a usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The request asked for logprobs (with a top list when `top`).
    logprobs: Option<Logprobs>,
    /// Completions' `echo`: the prompt's text, written before the first text.
    echo: RefCell<Option<String>>,
    /// The choice this formatter writes (0 unless the request asked for several).
    index: u32,
    /// Chat chunks of content only, rendered once (`None` inside if it could not be cut).
    content_frame: OnceCell<Option<ContentFrame>>,
}

/// Logprobs not yet written: each event takes those of the tokens before it.
struct Logprobs {
    top: bool,
    pending: RefCell<Vec<TokenLogprob>>,
    /// Characters of completion text whose tokens' logprobs went out (completions' offsets).
    offset: Cell<usize>,
}

impl Formatter {
    pub fn new(kind: Kind, rid: &str, model: Arc<str>, include_usage: bool) -> Formatter {
        let prefix = if kind == Kind::Chat {
            "chatcmpl-"
        } else {
            "cmpl-"
        };
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Formatter {
            kind,
            id: format!("{prefix}{rid}"),
            created,
            model,
            include_usage,
            logprobs: None,
            echo: RefCell::new(None),
            index: 0,
            content_frame: OnceCell::new(),
        }
    }

    /// A formatter for choice `index` of the same answer (same id and time, its own logprobs
    /// and echo).
    pub fn for_choice(&self, index: u32, echo: Option<String>) -> Formatter {
        Formatter {
            kind: self.kind,
            id: self.id.clone(),
            created: self.created,
            model: Arc::clone(&self.model),
            include_usage: self.include_usage,
            logprobs: self.logprobs.as_ref().map(|l| Logprobs {
                top: l.top,
                pending: RefCell::new(Vec::new()),
                offset: Cell::new(0),
            }),
            echo: RefCell::new(echo),
            index,
            content_frame: OnceCell::new(),
        }
    }

    /// Completions with `echo`: `prompt` goes before the answer's text.
    pub fn with_echo(self, prompt: Option<String>) -> Formatter {
        *self.echo.borrow_mut() = prompt;
        self
    }

    /// `text`, after the echoed prompt if that is still to be written.
    fn echoed<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        match self.echo.take() {
            Some(prompt) => std::borrow::Cow::Owned(prompt + text),
            None => std::borrow::Cow::Borrowed(text),
        }
    }

    /// Answers with logprobs, each token with `top` alternatives (`None`: no logprobs).
    pub fn with_logprobs(mut self, top: Option<u32>) -> Formatter {
        self.logprobs = top.map(|top| Logprobs {
            top: top > 0,
            pending: RefCell::new(Vec::new()),
            offset: Cell::new(0),
        });
        self
    }

    /// The `logprobs` of the next choice written: the pending tokens', in this kind's shape.
    fn take_logprobs(&self) -> Option<Value> {
        let l = self.logprobs.as_ref()?;
        let tokens = l.pending.take();
        Some(match self.kind {
            Kind::Chat => logprobs::chat(&tokens),
            Kind::Completion => {
                let at = l.offset.get();
                l.offset.set(
                    at + tokens
                        .iter()
                        .map(|t| t.token.chars().count())
                        .sum::<usize>(),
                );
                logprobs::text(&tokens, at, l.top)
            }
        })
    }

    // The streaming chunks below are written into the caller's buffer: a stream event then
    // costs no allocation of its own, and several events of one step go out as one write.

    /// Chat streams open with the assistant role (OpenAI sends it with empty content).
    pub fn role_chunk(&self, out: &mut Vec<u8>) {
        if self.kind == Kind::Chat {
            self.chat_chunk(
                out,
                Delta {
                    role: Some("assistant"),
                    content: Some(""),
                    reasoning_content: None,
                    tool_calls: None,
                },
                None,
            );
        }
    }

    /// A call's id: unique, as the response id is, and the same in every chunk that names it.
    fn call_id(&self, index: usize) -> String {
        let rid = self.id.strip_prefix("chatcmpl-").unwrap_or(&self.id);
        match self.index {
            0 => format!("call_{rid}_{index}"),
            choice => format!("call_{rid}_{choice}_{index}"),
        }
    }

    /// Each call as SGLang streams one: a chunk with its `id`, `type`, name and empty
    /// arguments, then one with the arguments.
    pub fn tool_call_chunks(&self, out: &mut Vec<u8>, calls: &[ToolCall]) {
        for (index, call) in calls.iter().enumerate() {
            let id = self.call_id(index);
            let opening = [ToolCallDelta {
                index: index as u32,
                id: Some(&id),
                kind: Some("function"),
                function: FunctionDelta {
                    name: Some(&call.name),
                    arguments: "",
                },
            }];
            let arguments = [ToolCallDelta {
                index: index as u32,
                id: None,
                kind: None,
                function: FunctionDelta {
                    name: None,
                    arguments: &call.arguments,
                },
            }];
            for piece in [&opening[..], &arguments[..]] {
                let delta = Delta {
                    tool_calls: Some(piece),
                    ..Delta::default()
                };
                self.chat_chunk(out, delta, None);
            }
        }
    }

    /// New text; for completions the finish reason rides on the same chunk.
    pub fn text_chunk(&self, out: &mut Vec<u8>, text: &str, finish: Option<&'static str>) {
        match self.kind {
            Kind::Chat => self.content_chunk(out, text),
            Kind::Completion => {
                let text = self.echoed(text);
                let choices = [TextChoice {
                    index: self.index,
                    text: &text,
                    logprobs: self.take_logprobs(),
                    finish_reason: finish,
                }];
                let chunk = TextChunk {
                    id: &self.id,
                    object: "text_completion",
                    created: self.created,
                    model: &self.model,
                    choices: &choices,
                    usage: None,
                };
                sse::write_json_event(out, &chunk);
            }
        }
    }

    /// Reasoning apart from the content (chat with a reasoning parser): a chunk of its own, as
    /// SGLang sends it.
    pub fn reasoning_chunk(&self, out: &mut Vec<u8>, reasoning: &str) {
        if self.kind == Kind::Chat {
            let delta = Delta {
                reasoning_content: Some(reasoning),
                ..Delta::default()
            };
            self.chat_chunk(out, delta, None);
        }
    }

    /// Chat's separate closing chunk with an empty delta.
    pub fn finish_chunk(&self, out: &mut Vec<u8>, finish: &'static str) {
        if self.kind == Kind::Chat {
            self.chat_chunk(out, Delta::default(), Some(finish));
        }
    }

    pub fn usage_chunk(&self, out: &mut Vec<u8>, usage: &Usage) {
        match self.kind {
            Kind::Chat => sse::write_json_event(
                out,
                &ChatChunk {
                    id: &self.id,
                    object: "chat.completion.chunk",
                    created: self.created,
                    model: &self.model,
                    choices: &[],
                    usage: Some(usage),
                },
            ),
            Kind::Completion => sse::write_json_event(
                out,
                &TextChunk {
                    id: &self.id,
                    object: "text_completion",
                    created: self.created,
                    model: &self.model,
                    choices: &[],
                    usage: Some(usage),
                },
            ),
        }
    }

    /// A chat chunk of content only: from the stream's frame while no logprobs are pending.
    fn content_chunk(&self, out: &mut Vec<u8>, text: &str) {
        let pending = (self.logprobs.as_ref()).is_some_and(|l| !l.pending.borrow().is_empty());
        let frame = if pending {
            None
        } else {
            let frame = self.content_frame.get_or_init(|| {
                let mut empty = Vec::new();
                self.chat_chunk(&mut empty, content_delta(""), None);
                ContentFrame::cut(&empty)
            });
            frame.as_ref()
        };
        match frame {
            Some(frame) => frame.write(out, text),
            None => self.chat_chunk(out, content_delta(text), None),
        }
    }

    fn chat_chunk(&self, out: &mut Vec<u8>, delta: Delta<'_>, finish: Option<&'static str>) {
        // A chunk carries the logprobs of the tokens since the last one that did (none for the
        // role chunk, which comes before any token).
        let logprobs = self
            .logprobs
            .as_ref()
            .filter(|l| !l.pending.borrow().is_empty())
            .and_then(|_| self.take_logprobs());
        let choices = [ChatChunkChoice {
            index: self.index,
            delta,
            logprobs,
            finish_reason: finish,
        }];
        let chunk = ChatChunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: &choices,
            usage: None,
        };
        sse::write_json_event(out, &chunk);
    }
}

impl Grammar for Formatter {
    fn start(&mut self, out: &mut Vec<u8>, _usage: &Usage) {
        self.role_chunk(out);
    }

    fn reasoning(&mut self, out: &mut Vec<u8>, text: &str) {
        self.reasoning_chunk(out, text);
    }

    fn text(&mut self, out: &mut Vec<u8>, text: &str, finish: Option<&'static str>) {
        // Chat closes with a chunk of its own; completions' finish rides on the last text.
        if !text.is_empty() || (finish.is_some() && self.kind == Kind::Completion) {
            self.text_chunk(out, text, finish);
        }
    }

    fn tool_calls(&mut self, out: &mut Vec<u8>, calls: &[ToolCall]) {
        self.tool_call_chunks(out, calls);
    }

    fn finish(&mut self, out: &mut Vec<u8>, ending: &Ending, usage: &Usage) {
        self.finish_chunk(out, ending.reason);
        if self.include_usage {
            self.usage_chunk(out, usage);
        }
        out.extend_from_slice(sse::DONE);
    }

    fn error(&mut self, out: &mut Vec<u8>, err: &GatewayError) {
        error_event(out, err);
    }

    fn cut(&mut self, out: &mut Vec<u8>, _usage: &Usage) {
        out.extend_from_slice(sse::DONE);
    }

    fn whole(self, a: Whole<'_>) -> Vec<u8> {
        self.complete(a.content, a.reasoning, a.calls, a.ending.reason, a.usage)
    }

    fn logprobs(&mut self, tokens: Vec<TokenLogprob>) {
        if let Some(l) = &self.logprobs {
            l.pending.borrow_mut().extend(tokens);
        }
    }
}

/// A failure after the stream started: an SSE event carrying the OpenAI error object. The
/// stream then ends without `[DONE]`, so no client mistakes it for a complete answer.
pub fn error_event(out: &mut Vec<u8>, err: &GatewayError) {
    sse::write_json_event(out, &err.body());
}

fn content_delta(text: &str) -> Delta<'_> {
    Delta {
        content: Some(text),
        ..Delta::default()
    }
}
