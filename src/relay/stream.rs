//! A generation relayed as a stream of its API's events ([`Grammar`]; for OpenAI: role chunk,
//! content, reasoning and tool-call deltas, finish chunk, optional usage chunk, `[DONE]`),
//! read by the client's connection (`pump`). The client leaving (or falling behind past the deadlines)
//! drops the generation, which aborts the worker's request and releases its load.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::grammar::{Ending, Grammar};
use super::pump;
use super::Generation;
use crate::error::GatewayError;
use crate::reasoning::{Format, Split, StreamSplitter};
use crate::tool_calls::{Reading, StreamParser, ToolCall};
use crate::upstream::generate::Delta;

struct State<G> {
    generation: Box<Generation>,
    grammar: G,
    started: bool,
    reader: Reader,
}

/// One generation's text through the parsers, as it streams.
pub(super) struct Reader {
    /// Splits the text into reasoning and content when a reasoning parser is on.
    reasoning: Option<StreamSplitter>,
    /// Reads the content for tool calls when the request has tools and a parser is on.
    tools: Option<StreamParser>,
}

pub fn respond<G: Grammar>(
    generation: Box<Generation>,
    grammar: G,
    reasoning: Option<Format>,
    tools: Option<Reading>,
) -> Response {
    let deadlines = generation.deadlines();
    let shutdown = generation.relay().shutdown.subscribe();
    let state = State {
        generation,
        grammar,
        started: false,
        reader: Reader::new(reasoning, tools),
    };
    let body = async_stream::stream! {
        let mut st = state;
        let mut out = Vec::with_capacity(512);
        loop {
            let next = st.generation.next().await;
            if !st.started {
                st.started = true;
                let usage = st.generation.usage();
                st.grammar.start(&mut out, &usage);
            }
            match next {
                Ok(Some(mut delta)) => {
                    let called = st.reader.write_delta(&mut st.grammar, &mut out, &mut delta);
                    if let Some(reason) = &delta.finish {
                        let usage = st.generation.usage();
                        st.grammar
                            .finish(&mut out, &Ending::new(reason, called), &usage);
                        yield Bytes::from(out);
                        break;
                    }
                    if !out.is_empty() {
                        yield Bytes::from(std::mem::replace(&mut out, Vec::with_capacity(512)));
                    }
                }
                Ok(None) => {
                    st.reader.write(&mut st.grammar, &mut out, "", true);
                    let usage = st.generation.usage();
                    st.grammar.cut(&mut out, &usage);
                    yield Bytes::from(out);
                    break;
                }
                Err(e) => {
                    st.grammar.error(&mut out, &GatewayError::Upstream(e));
                    yield Bytes::from(out);
                    break;
                }
            }
        }
    };
    let (body, slot) = pump::spawn(body, deadlines, shutdown);
    let mut resp = sse_headers(body);
    resp.extensions_mut().insert(slot);
    resp
}

impl Reader {
    pub(super) fn new(reasoning: Option<Format>, tools: Option<Reading>) -> Reader {
        Reader {
            reasoning: reasoning.map(StreamSplitter::new),
            tools: tools.map(StreamParser::new),
        }
    }

    /// A parser is on: the text goes through [`Reader::read`].
    fn active(&self) -> bool {
        self.reasoning.is_some() || self.tools.is_some()
    }

    /// One delta as events: its logprobs, then its text (through the parsers when one is on).
    /// Whether it held tool calls.
    pub(super) fn write_delta<G: Grammar>(
        &mut self,
        grammar: &mut G,
        out: &mut Vec<u8>,
        delta: &mut Delta,
    ) -> bool {
        grammar.logprobs(std::mem::take(&mut delta.logprobs));
        let finish = delta.finish.as_ref().map(|f| f.openai());
        if !self.active() {
            grammar.text(out, &delta.text, finish);
            return false;
        }
        self.write(grammar, out, &delta.text, finish.is_some())
    }

    /// `text` through the parsers as reasoning, content and tool-call events (`last`: what
    /// they held back goes out too). Whether it held tool calls.
    pub(super) fn write<G: Grammar>(
        &mut self,
        grammar: &mut G,
        out: &mut Vec<u8>,
        text: &str,
        last: bool,
    ) -> bool {
        let (split, calls) = self.read(text, last);
        split_events(grammar, out, &split);
        if !calls.is_empty() {
            grammar.tool_calls(out, &calls);
        }
        !calls.is_empty()
    }

    /// The next text through the parsers: the reasoning and content it makes certain, and at
    /// the `last` text what they held back and the calls.
    fn read(&mut self, text: &str, last: bool) -> (Split, Vec<ToolCall>) {
        let mut split = match self.reasoning.as_mut() {
            Some(splitter) => {
                let mut split = splitter.push(text);
                if last {
                    append(&mut split, splitter.finish());
                }
                split
            }
            None => Split {
                reasoning: String::new(),
                content: text.to_owned(),
            },
        };
        let mut calls = Vec::new();
        if let Some(parser) = self.tools.as_mut() {
            let mut content = parser.push(&split.content);
            if last {
                let end = parser.finish();
                content.push_str(&end.content);
                calls = end.calls;
            }
            split.content = content;
        }
        (split, calls)
    }
}

fn append(split: &mut Split, more: Split) {
    split.reasoning.push_str(&more.reasoning);
    split.content.push_str(&more.content);
}

/// The reasoning first, then the content, each only when there is some (as SGLang).
fn split_events<G: Grammar>(grammar: &mut G, out: &mut Vec<u8>, split: &Split) {
    if !split.reasoning.is_empty() {
        grammar.reasoning(out, &split.reasoning);
    }
    if !split.content.is_empty() {
        grammar.text(out, &split.content, None);
    }
}

pub fn sse_headers(body: Body) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        body,
    )
        .into_response()
}
