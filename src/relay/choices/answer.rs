//! Several choices relayed as OpenAI answers: one stream whose chunks carry each choice's
//! `index` (its own parsers, logprobs and echo per choice), or one object with every choice.
//! As SGLang: chat's finish chunks come after all content, in index order; completions' ride on
//! each choice's last text; one usage chunk (when asked) and one `[DONE]` close the stream.

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use super::Choices;
use crate::error::GatewayError;
use crate::reasoning::Format;
use crate::relay::collect;
use crate::relay::format::{self, Formatter};
use crate::relay::grammar::{Ending, Grammar};
use crate::relay::pump;
use crate::relay::stream::{sse_headers, Reader};
use crate::stream::sse;
use crate::tool_calls::Reading;

/// What one choice's stream needs of its own.
struct Out {
    format: Formatter,
    reader: Reader,
    /// How it ended, once it did (chat writes it at the end).
    ending: Option<Ending>,
}

struct State {
    choices: Choices,
    outs: Vec<Out>,
    started: bool,
}

/// `formats`: one per choice, in index order (see [`Formatter::for_choice`]).
pub fn stream(
    choices: Choices,
    formats: Vec<Formatter>,
    reasoning: Option<Format>,
    tools: Option<Reading>,
) -> Response {
    let deadlines = choices.deadlines();
    let shutdown = choices.relay().shutdown.subscribe();
    let outs = formats
        .into_iter()
        .map(|format| Out {
            format,
            reader: Reader::new(reasoning, tools.clone()),
            ending: None,
        })
        .collect();
    let state = State {
        choices,
        outs,
        started: false,
    };
    let body = async_stream::stream! {
        let mut st = state;
        let mut out = Vec::with_capacity(512);
        loop {
            let step = st.choices.next().await;
            if !st.started {
                st.started = true;
                for o in &st.outs {
                    o.format.role_chunk(&mut out);
                }
            }
            let Some((index, step)) = step else {
                st.close(&mut out);
                yield Bytes::from(out);
                break;
            };
            let Some(o) = st.outs.get_mut(index) else {
                continue;
            };
            match step {
                Ok(Some(mut delta)) => {
                    let called = o.reader.write_delta(&mut o.format, &mut out, &mut delta);
                    if let Some(reason) = &delta.finish {
                        o.ending = Some(Ending::new(reason, called));
                    }
                }
                // Cut without a finish reason: what the parsers held back, and no finish chunk.
                Ok(None) => {
                    o.reader.write(&mut o.format, &mut out, "", true);
                }
                Err(e) => {
                    format::error_event(&mut out, &GatewayError::Upstream(e));
                    yield Bytes::from(out);
                    break;
                }
            }
            if !out.is_empty() {
                yield Bytes::from(std::mem::replace(&mut out, Vec::with_capacity(512)));
            }
        }
    };
    let (body, slot) = pump::spawn(body, deadlines, shutdown);
    let mut resp = sse_headers(body);
    resp.extensions_mut().insert(slot);
    resp
}

impl State {
    /// Every choice ended: chat's finish chunks, the usage chunk when asked, `[DONE]`.
    fn close(&mut self, out: &mut Vec<u8>) {
        for o in &self.outs {
            if let Some(ending) = &o.ending {
                o.format.finish_chunk(out, ending.reason);
            }
        }
        if let Some(first) = self.outs.first().filter(|o| o.format.include_usage) {
            first.format.usage_chunk(out, &self.choices.usage());
        }
        out.extend_from_slice(sse::DONE);
    }
}

/// Every choice gathered into one object (errors rendered here: the exchange counted them).
pub async fn collect(
    mut choices: Choices,
    mut formats: Vec<Formatter>,
    reasoning: Option<Format>,
    tools: Option<Reading>,
) -> Response {
    let mut texts = vec![String::new(); formats.len()];
    let mut finishes = vec![None; formats.len()];
    while let Some((index, step)) = choices.next().await {
        match step {
            Ok(Some(delta)) => {
                if let (Some(text), Some(format)) = (texts.get_mut(index), formats.get_mut(index)) {
                    format.logprobs(delta.logprobs);
                    text.push_str(&delta.text);
                }
                if let (Some(finish), Some(slot)) = (delta.finish, finishes.get_mut(index)) {
                    *slot = Some(finish);
                }
            }
            Ok(None) => {}
            Err(e) => return GatewayError::Upstream(e).into_response(),
        }
    }
    let usage = choices.usage();
    let answers: Vec<Value> = formats
        .iter()
        .zip(texts.iter().zip(&finishes))
        .map(|(format, (text, finish))| {
            collect::answer(
                text,
                finish.as_ref(),
                reasoning,
                tools.as_ref(),
                usage.clone(),
                |w| {
                    format.with_choice(w.content, w.reasoning, w.calls, w.ending.reason, |c| {
                        serde_json::to_value(c).unwrap_or(Value::Null)
                    })
                },
            )
        })
        .collect();
    let Some(first) = formats.first() else {
        return GatewayError::invalid_body("no choices", None).into_response();
    };
    collect::json_response(first.envelope(answers, usage))
}
