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
    OutputText, PartEvent, ReasoningText, ResponseEvent, ResponseObject, TextDelta, TextDone,
    Usage,
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

    fn item_id(&self, prefix: &str) -> String {
        format!("{prefix}_{}_{}", self.rid, self.items.len())
    }

    /// Closes the open item: its text `done`, its part `done`, its own `done`.
    fn close(&mut self, out: &mut Vec<u8>, item_status: &'static str) {
        let Some(index) = self.open.take() else {
            return;
        };
        let Some(item) = self.items.get_mut(index) else {
            return;
        };
        match item {
            OutputItem::Message { status, .. } | OutputItem::Reasoning { status, .. } => {
                *status = item_status;
            }
            OutputItem::FunctionCall { .. } => {}
        }
        let item = item.clone();
        match &item {
            OutputItem::Message { id, content, .. } => {
                for (c, part) in content.iter().enumerate() {
                    let done = TextDone {
                        item_id: id,
                        output_index: index,
                        content_index: c,
                        text: &part.text,
                        logprobs: Some([]),
                    };
                    self.event(out, "response.output_text.done", done);
                    let part_done = PartEvent {
                        item_id: id,
                        output_index: index,
                        content_index: c,
                        part,
                    };
                    self.event(out, "response.content_part.done", part_done);
                }
            }
            OutputItem::Reasoning { id, content, .. } => {
                for (c, part) in content.iter().enumerate() {
                    let done = TextDone {
                        item_id: id,
                        output_index: index,
                        content_index: c,
                        text: &part.text,
                        logprobs: None,
                    };
                    self.event(out, "response.reasoning_text.done", done);
                    let part_done = PartEvent {
                        item_id: id,
                        output_index: index,
                        content_index: c,
                        part,
                    };
                    self.event(out, "response.content_part.done", part_done);
                }
            }
            OutputItem::FunctionCall { .. } => {}
        }
        self.event(
            out,
            "response.output_item.done",
            ItemEvent {
                output_index: index,
                item: &item,
            },
        );
    }

    /// Appends `text` to the open item if it is a message (or reasoning, `reasoning` true),
    /// opening one first if not; writes the delta.
    fn append(&mut self, out: &mut Vec<u8>, text: &str, reasoning: bool) {
        let fits = |item: &OutputItem| match item {
            OutputItem::Reasoning { .. } => reasoning,
            OutputItem::Message { .. } => !reasoning,
            OutputItem::FunctionCall { .. } => false,
        };
        let index = match self.open.filter(|&i| self.items.get(i).is_some_and(fits)) {
            Some(i) => i,
            None => self.open_text_item(out, reasoning),
        };
        let item_id = match self.items.get_mut(index) {
            Some(OutputItem::Message { id, content, .. }) => {
                if let Some(part) = content.first_mut() {
                    part.text.push_str(text);
                }
                id.clone()
            }
            Some(OutputItem::Reasoning { id, content, .. }) => {
                if let Some(part) = content.first_mut() {
                    part.text.push_str(text);
                }
                id.clone()
            }
            _ => return,
        };
        let (kind, logprobs) = if reasoning {
            ("response.reasoning_text.delta", None)
        } else {
            ("response.output_text.delta", Some([]))
        };
        let delta = TextDelta {
            item_id: &item_id,
            output_index: index,
            content_index: 0,
            delta: text,
            logprobs,
        };
        self.event(out, kind, delta);
    }

    fn open_text_item(&mut self, out: &mut Vec<u8>, reasoning: bool) -> usize {
        self.close(out, "completed");
        let index = self.items.len();
        let (item, id) = if reasoning {
            let id = self.item_id("rs");
            (
                OutputItem::Reasoning {
                    id: id.clone(),
                    summary: [],
                    content: Vec::new(),
                    status: "in_progress",
                },
                id,
            )
        } else {
            let id = self.item_id("msg");
            (
                OutputItem::Message {
                    id: id.clone(),
                    status: "in_progress",
                    role: "assistant",
                    content: Vec::new(),
                },
                id,
            )
        };
        self.event(
            out,
            "response.output_item.added",
            ItemEvent {
                output_index: index,
                item: &item,
            },
        );
        if reasoning {
            let part = ReasoningText::new(String::new());
            self.event(
                out,
                "response.content_part.added",
                PartEvent {
                    item_id: &id,
                    output_index: index,
                    content_index: 0,
                    part: &part,
                },
            );
        } else {
            let part = OutputText::new(String::new());
            self.event(
                out,
                "response.content_part.added",
                PartEvent {
                    item_id: &id,
                    output_index: index,
                    content_index: 0,
                    part: &part,
                },
            );
        }
        let item = match item {
            OutputItem::Reasoning {
                id,
                summary,
                status,
                ..
            } => OutputItem::Reasoning {
                id,
                summary,
                status,
                content: vec![ReasoningText::new(String::new())],
            },
            OutputItem::Message {
                id, status, role, ..
            } => OutputItem::Message {
                id,
                status,
                role,
                content: vec![OutputText::new(String::new())],
            },
            other => other,
        };
        self.items.push(item);
        self.open = Some(index);
        index
    }

    fn call_item(&self, call: &ToolCall, arguments: String) -> OutputItem {
        let n = self.items.len();
        OutputItem::FunctionCall {
            id: self.item_id("fc"),
            call_id: format!("call_{}_{n}", self.rid),
            name: call.name.clone(),
            arguments,
            status: "completed",
        }
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
            Some(OutputItem::Message { status: s, .. } | OutputItem::Reasoning { status: s, .. })
                if a.calls.is_none_or(<[_]>::is_empty) =>
            {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::sse::SseParser;

    fn events(bytes: &[u8]) -> Vec<(String, Value)> {
        let mut p = SseParser::new(1 << 20);
        p.push(bytes);
        let mut out = Vec::new();
        while let Ok(Some(ev)) = p.next_event() {
            let v: Value = serde_json::from_slice(&ev.data).unwrap();
            out.push((ev.event.clone().unwrap_or_default(), v));
        }
        out
    }

    #[test]
    fn a_stream_numbers_its_events_and_closes_with_the_whole_response() {
        let usage = openai::Usage::new(10, 3, 4);
        let call = ToolCall {
            name: "w".into(),
            arguments: r#"{"c": "P"}"#.into(),
        };
        let ending = Ending {
            reason: "length",
            stop_string: None,
        };
        let mut f = ResponsesFormat::new("r", "m".into(), Map::new());
        let mut out = Vec::new();
        f.start(&mut out, &usage);
        f.reasoning(&mut out, "hm");
        f.text(&mut out, "Hi", None);
        f.text(&mut out, " there", None);
        f.tool_calls(&mut out, &[call.clone()]);
        f.finish(&mut out, &ending, &usage);
        let evs = events(&out);
        for (i, (name, v)) in evs.iter().enumerate() {
            assert_eq!(v["type"], name.as_str(), "{v}");
            assert_eq!(v["sequence_number"], i, "{v}");
        }
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"response.created"));
        assert_eq!(names.last(), Some(&"response.incomplete"));
        let deltas: String = evs
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .map(|(_, v)| v["delta"].as_str().unwrap())
            .collect();
        assert_eq!(deltas, "Hi there");
        let last = &evs.last().unwrap().1["response"];
        assert_eq!(last["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 4);
        let whole = ResponsesFormat::new("r", "m".into(), Map::new()).whole(Whole {
            content: "Hi there",
            reasoning: Some("hm"),
            calls: Some(&[call]),
            ending,
            usage,
        });
        let whole: Value = serde_json::from_slice(&whole).unwrap();
        assert_eq!(whole["output"], last["output"]);
        assert_eq!(whole["output"][0]["type"], "reasoning");
        assert_eq!(whole["output"][2]["type"], "function_call");
    }
}
