//! gpt-oss's Harmony format read as SGLang 0.5.9's `HarmonyParser` (canonical strategy) reads
//! it: `<|channel|>analysis<|message|>…<|end|>` is reasoning, `final` (to `<|return|>` or the
//! end) and `commentary … <|end|>` are content, a block ending in `<|call|>` is a tool call
//! (kept whole, markers and all), and the text between blocks is content, with SGLang's quirks
//! (stray markers dropped, a `commentary` filler after a call dropped, an unknown channel or an
//! unfinished commentary swallowing the rest, the start of a marker at the very end dropped).
//!
//! Text with no `<|channel|>` and no `<|start|>` is all content here; SGLang's text fallback
//! (for output decoded without special tokens) is not modelled: the gateway keeps gpt-oss's
//! special tokens, as SGLang's server does.

use super::{held_prefix_len, python_strip};

const MARKERS: [(&str, Mark); 7] = [
    ("<|start|>", Mark::Start),
    ("<|channel|>", Mark::Channel),
    ("<|message|>", Mark::Message),
    ("<|constrain|>", Mark::Constrain),
    ("<|end|>", Mark::End),
    ("<|call|>", Mark::Call),
    ("<|return|>", Mark::Return),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Text,
    Start,
    Channel,
    Message,
    Constrain,
    End,
    Call,
    Return,
}

#[derive(Debug, Clone, Copy)]
struct Token {
    mark: Mark,
    start: usize,
    end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Reasoning,
    /// The whole block, markers and all.
    ToolCall,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub text: String,
    /// An unfinished analysis block read to the very end of the text so far.
    pub open: bool,
}

/// Whether SGLang reads `text` as Harmony (its canonical strategy).
pub fn is_harmony(text: &str) -> bool {
    text.contains("<|channel|>") || text.contains("<|start|>")
}

/// The events of a finished text (`streaming: false`), or of the text so far: then an open
/// analysis or final block stops short of what may still become its closing marker.
pub fn events(text: &str, streaming: bool) -> Vec<Event> {
    let tokens = tokens(text);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < tokens.len() {
        let t = tokens[pos];
        let slice = &text[t.start..t.end];
        match t.mark {
            Mark::Text if pos + 1 == tokens.len() => {
                // The last text: what may begin a marker waits (and is lost at the end).
                let keep = MARKERS
                    .iter()
                    .map(|(m, _)| held_prefix_len(slice, m))
                    .max()
                    .unwrap_or(0);
                push(&mut out, EventKind::Normal, &slice[..slice.len() - keep]);
                break;
            }
            Mark::Start | Mark::Channel => match block(text, &tokens, pos, streaming) {
                Some((event, next)) => {
                    out.extend(event);
                    pos = next;
                }
                None => {
                    out.extend(partial_analysis(text, &tokens, pos, streaming));
                    break;
                }
            },
            _ => {
                if !filler(text, &tokens, pos) && !standalone_marker(slice) {
                    out.push(Event {
                        kind: EventKind::Normal,
                        text: slice.to_owned(),
                        open: false,
                    });
                }
                pos += 1;
            }
        }
    }
    if streaming {
        // Whether the filter drops a piece depends on how the whole text ends: the stream
        // stops its content before any piece it might drop instead ([`maybe_dropped`]).
        return out;
    }
    filter_commentary(out, python_rstrip(text).ends_with("<|call|>"))
}

fn push(out: &mut Vec<Event>, kind: EventKind, text: &str) {
    if !text.is_empty() {
        out.push(Event {
            kind,
            text: text.to_owned(),
            open: false,
        });
    }
}

/// SGLang's `iter_tokens`: the markers, and the text between them; an unknown `<|x|>` is text
/// (its `<|`, then the rest up to the next `<|` after its `|>`).
fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let tok = |mark, start, end| Token { mark, start, end };
    let (mut pos, mut unknown) = (0, false);
    while pos < text.len() {
        let Some(at) = text[pos..].find("<|").map(|i| i + pos) else {
            break;
        };
        if at > pos {
            out.push(tok(Mark::Text, pos, at));
        }
        if let Some((m, mark)) = MARKERS.iter().find(|(m, _)| text[at..].starts_with(m)) {
            out.push(tok(*mark, at, at + m.len()));
            pos = at + m.len();
            continue;
        }
        let tail = &text[at..];
        if MARKERS.iter().any(|(m, _)| m.starts_with(tail)) {
            out.push(tok(Mark::Text, at, text.len()));
            pos = text.len();
            break;
        }
        unknown = true;
        out.push(tok(Mark::Text, at, at + 2));
        match text[at + 2..].find("|>").map(|i| i + at + 2) {
            Some(close) => match text[close + 2..].find("<|").map(|i| i + close + 2) {
                Some(next) => {
                    out.push(tok(Mark::Text, at + 2, next));
                    pos = next;
                }
                None => {
                    out.push(tok(Mark::Text, at + 2, text.len()));
                    pos = text.len();
                    break;
                }
            },
            None => pos = at + 2,
        }
    }
    if pos < text.len() {
        out.push(tok(Mark::Text, pos, text.len()));
    } else if unknown && MARKERS.iter().any(|(m, _)| text.ends_with(m)) {
        out.push(tok(Mark::Text, pos, pos));
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Channel {
    Analysis,
    Commentary,
    Final,
}

/// The first channel and the first message marker from `pos` on (a `<|start|>` skipped).
fn header(tokens: &[Token], pos: usize) -> (Option<usize>, Option<usize>) {
    let from = pos + usize::from(tokens[pos].mark == Mark::Start);
    let mut channel = None;
    for (i, t) in tokens.iter().enumerate().skip(from) {
        match t.mark {
            Mark::Channel if channel.is_none() => channel = Some(i),
            Mark::Message => return (channel, Some(i)),
            _ => {}
        }
    }
    (channel, None)
}

fn channel(text: &str, tokens: &[Token], channel: usize, message: usize) -> Option<Channel> {
    let name = python_strip(&text[tokens[channel + 1].start..tokens[message].start]).to_lowercase();
    [
        ("analysis", Channel::Analysis),
        ("commentary", Channel::Commentary),
        ("final", Channel::Final),
    ]
    .into_iter()
    .find(|(n, _)| name.starts_with(n))
    .map(|(_, c)| c)
}

/// SGLang's `_parse_block`: the block's event and the token after it; `None` if it is not
/// finished (or its channel unknown).
fn block(
    text: &str,
    tokens: &[Token],
    pos: usize,
    streaming: bool,
) -> Option<(Option<Event>, usize)> {
    let event = |kind, text: &str| {
        Some(Event {
            kind,
            text: text.to_owned(),
            open: false,
        })
    };
    let (channel_at, message) = header(tokens, pos);
    let message = message?;
    let body = tokens[message].end;
    let ends =
        |marks: &[Mark]| (message + 1..tokens.len()).find(|&i| marks.contains(&tokens[i].mark));
    let Some(channel_at) = channel_at else {
        // A tool's answer: straight to its message.
        let end = ends(&[Mark::End, Mark::Call, Mark::Return])?;
        return Some((
            event(EventKind::Normal, &text[body..tokens[end].start]),
            end + 1,
        ));
    };
    let kind = channel(text, tokens, channel_at, message)?;
    let end = match kind {
        Channel::Final => ends(&[Mark::Return]),
        _ => ends(&[Mark::End, Mark::Call]),
    };
    let Some(end) = end else {
        if kind != Channel::Final {
            return None;
        }
        let open = &text[body..];
        let keep = if streaming {
            held_prefix_len(open, "<|return|>")
        } else {
            0
        };
        return Some((
            event(EventKind::Normal, &open[..open.len() - keep]),
            tokens.len(),
        ));
    };
    let content = &text[body..tokens[end].start];
    let raw = &text[tokens[pos].start..tokens[end].end];
    Some(match (kind, tokens[end].mark) {
        (Channel::Analysis | Channel::Commentary, Mark::Call) => {
            (event(EventKind::ToolCall, raw), end + 1)
        }
        (Channel::Analysis, _) => (event(EventKind::Reasoning, content), end + 1),
        (Channel::Commentary, _) => (event(EventKind::Normal, content), end + 1),
        (Channel::Final, _) => match tokens.get(end + 1) {
            // The text right after `<|return|>` belongs to the final answer.
            Some(next) if next.mark == Mark::Text => {
                let with = format!("{content}{}", &text[next.start..next.end]);
                (event(EventKind::Normal, &with), end + 2)
            }
            _ => (event(EventKind::Normal, content), end + 1),
        },
    })
}

/// SGLang's `_parse_partial_analysis`: an unfinished analysis block is reasoning so far.
fn partial_analysis(text: &str, tokens: &[Token], pos: usize, streaming: bool) -> Option<Event> {
    let (Some(channel_at), Some(message)) = header(tokens, pos) else {
        return None;
    };
    if channel(text, tokens, channel_at, message) != Some(Channel::Analysis) {
        return None;
    }
    let open = &text[tokens[message].end..];
    // Streamed, a block addressed to a tool (`to=…`, a built-in tool's call: it will end in
    // `<|call|>` and be no reasoning) waits for its end.
    let addressed = text[tokens[pos].start..tokens[message].start].contains("to=");
    let keep = match streaming {
        true if addressed => open.len(),
        true => held_prefix_len(open, "<|end|>").max(held_prefix_len(open, "<|call|>")),
        false => 0,
    };
    Some(Event {
        kind: EventKind::Reasoning,
        text: open[..open.len() - keep].to_owned(),
        open: !addressed && keep == 0,
    })
}

/// SGLang's `_is_commentary_filler_between_blocks`: a `commentary` text or a message marker
/// right after a call.
fn filler(text: &str, tokens: &[Token], pos: usize) -> bool {
    if pos == 0 || tokens[pos - 1].mark != Mark::Call {
        return false;
    }
    let t = tokens[pos];
    let word = python_strip(&text[t.start..t.end]).to_lowercase() == "commentary";
    t.mark == Mark::Message || (t.mark == Mark::Text && word)
}

fn standalone_marker(text: &str) -> bool {
    let stripped = python_strip(text);
    MARKERS.iter().any(|(m, _)| *m == stripped)
}

/// `HarmonyParser.parse`'s filter: after a tool call (or any event, when the text ends with a
/// call), content that spells (the start of) `commentary` is dropped.
fn filter_commentary(events: Vec<Event>, ends_with_call: bool) -> Vec<Event> {
    let (mut on, mut partial) = (false, String::new());
    let mut out = Vec::with_capacity(events.len());
    for e in events {
        if e.kind == EventKind::Normal {
            if on || !partial.is_empty() {
                let maybe = format!("{partial}{}", python_strip(&e.text).to_lowercase());
                if maybe == "commentary" {
                    (on, partial) = (false, String::new());
                    continue;
                }
                if "commentary".starts_with(&maybe) {
                    partial = maybe;
                    continue;
                }
                (on, partial) = (false, String::new());
            } else {
                partial.clear();
            }
        }
        if e.kind == EventKind::ToolCall {
            (on, partial) = (true, String::new());
        } else if ends_with_call {
            on = true;
        }
        out.push(e);
    }
    out
}

/// Whether SGLang's filter could drop this content (whatever came before it).
pub fn maybe_dropped(e: &Event) -> bool {
    e.kind == EventKind::Normal && "commentary".contains(&python_strip(&e.text).to_lowercase())
}

fn python_rstrip(s: &str) -> &str {
    s.trim_end_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(EventKind, String)> {
        events(text, false)
            .into_iter()
            .map(|e| (e.kind, e.text))
            .collect()
    }

    #[test]
    fn channels_become_reasoning_content_and_calls() {
        use EventKind::*;
        let call = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>";
        let text = format!("<|channel|>analysis<|message|>why<|end|>{call}commentary<|start|>assistant<|channel|>final<|message|>ok<|return|>");
        assert_eq!(
            kinds(&text),
            [
                (Reasoning, "why".to_owned()),
                (ToolCall, call.to_owned()),
                (Normal, "ok".to_owned())
            ]
        );
        assert_eq!(
            kinds("<|channel|>analysis<|message|>cut <|en"),
            [(Reasoning, "cut <|en".to_owned())]
        );
        let open = events("<|channel|>analysis<|message|>cut <|en", true);
        assert_eq!(open[0].text, "cut ");
    }
}
