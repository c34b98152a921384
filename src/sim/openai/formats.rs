//! The two OpenAI formats: how a run is written as chat completion objects and chunks, and as
//! text completion objects and chunks.

use serde::Serialize;
use serde_json::Value;

use super::{finish, Common};
use crate::sim::reply::Format;
use crate::sim::run::{Run, Update};
use crate::sim::shapes::{ChatChoice, ChunkChoice, Delta, Finish, Message, TextChoice};
use crate::stream::sse;

/// `/v1/chat/completions`: a role chunk first, content chunks, then a separate finish chunk.
pub struct Chat(pub Common);

impl Chat {
    fn chunk(
        &self,
        run: &Run,
        delta: Delta<'_>,
        lp: Option<Value>,
        finish: Finish,
        out: &mut Vec<u8>,
    ) {
        let choice = ChunkChoice {
            index: self.0.index,
            delta,
            logprobs: lp,
            finish,
        };
        let chunk = self
            .0
            .envelope(run, "chat.completion.chunk", vec![choice], None);
        sse::write_json_event(out, &chunk);
    }
}

impl Format for Chat {
    fn body<'r>(&'r self, run: &'r Run) -> impl Serialize + 'r {
        let message = Message {
            role: "assistant",
            content: run.text(),
            reasoning_content: None,
            tool_calls: None,
        };
        let choice = ChatChoice {
            index: self.0.index,
            message,
            logprobs: self.0.all_logprobs(run),
            finish: finish(run),
        };
        let usage = Some(Some(self.0.usage(run)));
        self.0.envelope(run, "chat.completion", vec![choice], usage)
    }

    fn update(&mut self, run: &Run, update: &Update, out: &mut Vec<u8>) {
        let first = self.0.sent == 0 && run.produced == update.new_tokens;
        let text = self.0.new_text(run);
        if first {
            let role = Delta {
                role: Some("assistant"),
                content: Some(""),
                ..Delta::default()
            };
            self.chunk(run, role, None, Finish::default(), out);
        }
        if !text.is_empty() {
            let content = Delta {
                content: Some(text),
                ..Delta::default()
            };
            let lp = self.0.new_logprobs(run, update);
            self.chunk(run, content, lp, Finish::default(), out);
        }
        if update.finished && !self.0.parallel {
            self.chunk(run, Delta::default(), None, finish(run), out);
            if self.0.include_usage {
                self.0.write_usage(run, "chat.completion.chunk", out);
            }
        }
    }

    /// A graceful abort (no status) ends like a finish: the finish chunk, then usage when asked
    /// (`serving_chat.py` passes it to the normal chunk path).
    fn aborted(&mut self, run: &Run, out: &mut Vec<u8>) {
        if self.0.parallel {
            return;
        }
        self.chunk(run, Delta::default(), None, Finish::abort(), out);
        if self.0.include_usage {
            self.0.write_usage(run, "chat.completion.chunk", out);
        }
    }
}

/// `/v1/completions`: one chunk per update, the last one carrying the finish reason.
pub struct Text(pub Common);

impl Text {
    fn chunk(&self, run: &Run, text: &str, lp: Option<Value>, finish: Finish, out: &mut Vec<u8>) {
        let choice = TextChoice {
            index: self.0.index,
            text,
            logprobs: lp,
            finish,
        };
        let chunk = self
            .0
            .envelope(run, "text_completion", vec![choice], Some(None));
        sse::write_json_event(out, &chunk);
    }
}

impl Format for Text {
    fn body<'r>(&'r self, run: &'r Run) -> impl Serialize + 'r {
        let choice = TextChoice {
            index: self.0.index,
            text: run.text(),
            logprobs: self.0.all_logprobs(run),
            finish: finish(run),
        };
        let usage = Some(Some(self.0.usage(run)));
        self.0.envelope(run, "text_completion", vec![choice], usage)
    }

    fn update(&mut self, run: &Run, update: &Update, out: &mut Vec<u8>) {
        let text = self.0.new_text(run);
        let lp = self.0.new_logprobs(run, update);
        self.chunk(run, text, lp, finish(run), out);
        if update.finished && self.0.include_usage {
            self.0.write_usage(run, "text_completion", out);
        }
    }

    fn aborted(&mut self, run: &Run, out: &mut Vec<u8>) {
        self.chunk(run, "", None, Finish::abort(), out);
        if self.0.include_usage {
            self.0.write_usage(run, "text_completion", out);
        }
    }
}
