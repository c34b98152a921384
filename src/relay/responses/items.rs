//! The output items of a Responses stream: opening one (its `added` events), adding to its
//! text (the `delta`s), closing it (its `done` events).

use super::ResponsesFormat;
use crate::protocol::openai::responses::{
    ItemEvent, OutputItem, OutputText, PartEvent, ReasoningText, TextDelta, TextDone,
};
use crate::tool_calls::ToolCall;

impl ResponsesFormat {
    pub(super) fn item_id(&self, prefix: &str) -> String {
        format!("{prefix}_{}_{}", self.rid, self.items.len())
    }

    /// Closes the open item: its text `done`, its part `done`, its own `done`.
    pub(super) fn close(&mut self, out: &mut Vec<u8>, item_status: &'static str) {
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
    pub(super) fn append(&mut self, out: &mut Vec<u8>, text: &str, reasoning: bool) {
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

    pub(super) fn open_text_item(&mut self, out: &mut Vec<u8>, reasoning: bool) -> usize {
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

    pub(super) fn call_item(&self, call: &ToolCall, arguments: String) -> OutputItem {
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
