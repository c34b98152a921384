//! OpenAI Responses output: the stream's events, each with its `sequence_number`
//! (`response.created`, `response.in_progress`; per output item `response.output_item.added`,
//! its content part's `added` / text `delta`s / text `done` / part `done`, or a function call's
//! `arguments.delta` / `arguments.done`, then `response.output_item.done`; at the end
//! `response.completed`, or `response.incomplete` when cut at `max_output_tokens`), and the
//! whole `response` object. The items are kept as they are streamed, so the closing event
//! carries exactly what the stream said.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::grammar::{Ending, Grammar, Whole};
use crate::error::GatewayError;
use crate::protocol::openai;
use crate::protocol::openai::responses::{
    ArgumentsDelta, ArgumentsDone, ErrorEvent, Event, IncompleteDetails, ItemEvent, OutputItem,
    OutputText, ReasoningText, ResponseEvent, ResponseObject, Usage,
};
use crate::stream::sse;
use crate::tool_calls::ToolCall;

pub struct ResponsesFormat {
    /// `resp_<rid>`.
    id: String,
    rid: String,
    created_at: u64,
    model: Arc<str>,
    /// What the request asked for, echoed in the response object.
    settings: Map<String, Value>,
    items: Vec<OutputItem>,
    /// The streamed item still open (its index in `items`).
    open: Option<usize>,
    sequence: u64,
}

fn usage(u: &openai::Usage) -> Usage {
    Usage::new(
        u.prompt_tokens,
        u.completion_tokens,
        u.prompt_tokens_details.cached_tokens,
    )
}

/// The response's `status` and why it is incomplete, for how the generation ended.
fn status(ending: &Ending) -> (&'static str, Option<IncompleteDetails>) {
    match ending.reason {
        "length" => (
            "incomplete",
            Some(IncompleteDetails {
                reason: "max_output_tokens",
            }),
        ),
        _ => ("completed", None),
    }
}

impl ResponsesFormat {
    pub fn new(rid: &str, model: Arc<str>, settings: Map<String, Value>) -> ResponsesFormat {
        let created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        ResponsesFormat {
            id: format!("resp_{rid}"),
            rid: rid.to_owned(),
            created_at,
            model,
            settings,
            items: Vec::new(),
            open: None,
            sequence: 0,
        }
    }

    fn event<T: Serialize>(&mut self, out: &mut Vec<u8>, kind: &'static str, body: T) {
        let event = Event {
            kind,
            sequence_number: self.sequence,
            body,
        };
        self.sequence += 1;
        sse::write_named_event(out, kind, &event);
    }

    fn response(
        &self,
        status: &'static str,
        incomplete: Option<IncompleteDetails>,
        usage: Option<Usage>,
    ) -> ResponseObject<'_> {
        ResponseObject {
            id: &self.id,
            object: "response",
            created_at: self.created_at,
            status,
            model: &self.model,
            output: &self.items,
            usage,
            incomplete_details: incomplete,
            error: None,
            previous_response_id: None,
            store: false,
            background: false,
            settings: &self.settings,
        }
    }

    fn response_event(
        &mut self,
        out: &mut Vec<u8>,
        kind: &'static str,
        done: Option<(&Ending, Usage)>,
    ) {
        let (status, incomplete) = done.map_or(("in_progress", None), |(e, _)| status(e));
        let event = Event {
            kind,
            sequence_number: self.sequence,
            body: ResponseEvent {
                response: self.response(status, incomplete, done.map(|(_, u)| u)),
            },
        };
        sse::write_named_event(out, kind, &event);
        self.sequence += 1;
    }
}

impl Grammar for ResponsesFormat {
    fn start(&mut self, out: &mut Vec<u8>, _usage: &openai::Usage) {
        self.response_event(out, "response.created", None);
        self.response_event(out, "response.in_progress", None);
    }

    fn reasoning(&mut self, out: &mut Vec<u8>, text: &str) {
        self.append(out, text, true);
    }

    fn text(&mut self, out: &mut Vec<u8>, text: &str, _finish: Option<&'static str>) {
        if !text.is_empty() {
            self.append(out, text, false);
        }
    }

    fn tool_calls(&mut self, out: &mut Vec<u8>, calls: &[ToolCall]) {
        self.close(out, "completed");
        for call in calls {
            let index = self.items.len();
            let item = self.call_item(call, call.arguments.clone());
            let opening = match &item {
                OutputItem::FunctionCall {
                    id, call_id, name, ..
                } => OutputItem::FunctionCall {
                    id: id.clone(),
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                    status: "in_progress",
                },
                other => other.clone(),
            };
            self.event(
                out,
                "response.output_item.added",
                ItemEvent {
                    output_index: index,
                    item: &opening,
                },
            );
            if let OutputItem::FunctionCall {
                id,
                name,
                arguments,
                ..
            } = &item
            {
                let delta = ArgumentsDelta {
                    item_id: id,
                    output_index: index,
                    delta: arguments,
                };
                self.event(out, "response.function_call_arguments.delta", delta);
                let done = ArgumentsDone {
                    item_id: id,
                    output_index: index,
                    name,
                    arguments,
                };
                self.event(out, "response.function_call_arguments.done", done);
            }
            self.event(
                out,
                "response.output_item.done",
                ItemEvent {
                    output_index: index,
                    item: &item,
                },
            );
            self.items.push(item);
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>, ending: &Ending, u: &openai::Usage) {
        let (status, _) = status(ending);
        self.close(out, status);
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.response_event(out, kind, Some((ending, usage(u))));
    }

    fn error(&mut self, out: &mut Vec<u8>, err: &GatewayError) {
        let body = err.body().error;
        let event = ErrorEvent {
            code: body.code.as_deref().or(Some(body.kind.as_str())),
            message: &body.message,
            param: body.param.as_deref(),
        };
        self.event(out, "error", event);
    }

    fn cut(&mut self, out: &mut Vec<u8>, usage: &openai::Usage) {
        self.finish(out, &Ending::stopped(), usage);
    }

    fn whole(mut self, a: Whole<'_>) -> Vec<u8> {
        let (status, incomplete) = status(&a.ending);
        if let Some(r) = a.reasoning.filter(|r| !r.is_empty()) {
            let id = self.item_id("rs");
            self.items.push(OutputItem::Reasoning {
                id,
                summary: [],
                content: vec![ReasoningText::new(r.to_owned())],
                status: "completed",
            });
        }
        if !a.content.is_empty() {
            let id = self.item_id("msg");
            self.items.push(OutputItem::Message {
                id,
                status: "completed",
                role: "assistant",
                content: vec![OutputText::new(a.content.to_owned())],
            });
        }
        // As a stream says it: the item still open at the end (text, not a call) ends as the
        // response does; the ones before it were completed.
        match self.items.last_mut() {
            Some(
                OutputItem::Message { status: s, .. } | OutputItem::Reasoning { status: s, .. },
            ) if a.calls.is_none_or(<[_]>::is_empty) => {
                *s = status;
            }
            _ => {}
        }
        for call in a.calls.unwrap_or_default() {
            let item = self.call_item(call, call.arguments.clone());
            self.items.push(item);
        }
        serde_json::to_vec(&self.response(status, incomplete, Some(usage(&a.usage))))
            .unwrap_or_default()
    }
}

mod items;
#[cfg(test)]
mod tests;
