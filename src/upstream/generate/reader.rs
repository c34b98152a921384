//! One `/generate` stream event read into what it adds: cut down where it repeats the last one
//! (`splice`), parsed, and taken in by `received`, which then says which values the next event
//! may repeat.

use serde_json::value::RawValue;

use super::received::{Received, Sent};
use super::splice::{Cut, Span, Splice};
use crate::protocol::sglang::{GenerateChunk, MetaInfo};

/// Reads the events of one stream.
#[derive(Debug, Default)]
pub struct ChunkReader {
    splice: Splice,
    received: Received,
    /// The values the splice remembers, in the order they appear in the event.
    remembered: Vec<Field>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Text,
    Ids,
}

/// What one event added.
#[derive(Debug)]
pub struct Chunk {
    /// Its new text; `None` when the event has no `text` field.
    pub text: Option<String>,
    /// How many of [`ChunkReader::ids`]' last ids it added.
    pub added: usize,
    pub meta: MetaInfo,
}

impl ChunkReader {
    /// A reader with room for an answer of up to `max_tokens`.
    pub fn with_room(max_tokens: usize) -> ChunkReader {
        ChunkReader {
            received: Received::with_room(max_tokens),
            ..ChunkReader::default()
        }
    }

    pub fn read(&mut self, event: &[u8]) -> Result<Chunk, serde_json::Error> {
        let (bytes, cut) = match self.splice.cut(event) {
            Some((bytes, cut)) => (bytes, Some(cut)),
            None => (event, None),
        };
        // Checked as UTF-8 at once rather than string by string (`from_slice`): one pass instead
        // of a call per key and value, a sixth of the event's parse.
        let json = std::str::from_utf8(bytes).map_err(serde::de::Error::custom)?;
        let GenerateChunk {
            text,
            output_ids,
            meta_info: meta,
        } = serde_json::from_str(json)?;
        let text = value(Field::Text, text, json, &cut, &self.remembered);
        let ids = value(Field::Ids, output_ids, json, &cut, &self.remembered);
        let (new_text, added) = self.received.take(
            text.map(|v| v.sent),
            ids.map(|v| v.sent),
            meta.completion_tokens,
        )?;
        // The values that were all of themselves so far, for the next event to repeat.
        let continues = self.received.continues();
        let mut next = [
            text.filter(|_| continues.text).and_then(Value::kept),
            ids.filter(|_| continues.ids).and_then(Value::kept),
        ];
        if let [Some((a, _)), Some((b, _))] = next {
            if b.open < a.open {
                next.swap(0, 1);
            }
        }
        let mut spans = [Span::default(); 2];
        let mut n = 0;
        self.remembered.clear();
        for (span, field) in next.into_iter().flatten() {
            spans[n] = span;
            n += 1;
            self.remembered.push(field);
        }
        self.splice.remember(event, &spans[..n]);
        Ok(Chunk {
            text: new_text,
            added,
            meta,
        })
    }

    /// Every output id so far.
    pub fn ids(&self) -> &[u32] {
        self.received.ids()
    }
}

/// One of the event's values: as sent, and where it sits in the event (when known).
#[derive(Clone, Copy)]
struct Value<'a> {
    field: Field,
    sent: Sent<'a>,
    span: Option<Span>,
}

impl Value<'_> {
    /// Where it sits, to be remembered.
    fn kept(self) -> Option<(Span, Field)> {
        Some((self.span?, self.field))
    }
}

/// `raw`, a value parsed from `bytes` (the event, or the event cut down): cut when the splice
/// remembered it, else whole.
fn value<'a>(
    field: Field,
    raw: Option<&'a RawValue>,
    bytes: &str,
    cut: &Option<Cut<'_>>,
    remembered: &[Field],
) -> Option<Value<'a>> {
    let raw = raw?;
    if let Some(cut) = cut {
        if let Some(i) = remembered.iter().position(|f| *f == field) {
            return Some(Value {
                field,
                sent: Sent::Added(raw),
                span: cut.spans.get(i).copied(),
            });
        }
    }
    // Where it sits in `bytes`, and so in the event (a value parsed from a slice borrows it).
    let at = (raw.get().as_ptr() as usize).checked_sub(bytes.as_ptr() as usize);
    let open = match cut {
        Some(cut) => at.and_then(|at| cut.event_offset(at)),
        None => at,
    };
    Some(Value {
        field,
        sent: Sent::Whole(raw),
        span: open.map(|open| Span {
            open,
            close: open + raw.get().len().saturating_sub(1),
        }),
    })
}

#[cfg(test)]
mod tests;
