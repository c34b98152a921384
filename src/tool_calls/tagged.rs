//! SGLang 0.5.9's `qwen25` (`Qwen25Detector`) and `hermes` (`HermesDetector`): the
//! `<tool_call>{json}</tool_call>` family. The content is the text before the first block,
//! stripped; text between and after blocks is dropped, as SGLang drops it. `has_call` and
//! `start` also serve `qwen3_coder` and `glm45`, whose calls open with the same `<tool_call>`.

use serde_json::Value;

use super::whole::base_json;
use super::{Parsed, ParserKind, Start};
use crate::reasoning::python_strip;

fn tags(kind: ParserKind) -> (&'static str, &'static str) {
    match kind {
        ParserKind::Qwen25 => ("<tool_call>\n", "\n</tool_call>"),
        _ => ("<tool_call>", "</tool_call>"),
    }
}

pub fn has_call(kind: ParserKind, text: &str) -> bool {
    text.contains(tags(kind).0)
}

pub fn start(kind: ParserKind, text: &str) -> Start {
    Start::first_of(text, &[tags(kind).0])
}

/// The calls of every block, or `None` where SGLang's parser raises.
pub fn parse(kind: ParserKind, text: &str, tool_names: &[String]) -> Option<Parsed> {
    let first = text.find(tags(kind).0)?;
    let mut calls = Vec::new();
    for block in blocks(kind, text) {
        match serde_json::from_str::<Value>(python_strip(block)) {
            Ok(value) => calls.extend(base_json(value, tool_names)?),
            // Qwen2.5's parser logs and skips a block that is not JSON; Hermes' raises.
            Err(_) if kind == ParserKind::Qwen25 => {}
            Err(_) => return None,
        }
    }
    Some(Parsed {
        content: python_strip(&text[..first]).to_owned(),
        calls,
    })
}

/// The insides of the call blocks, as SGLang's regular expressions find them: Qwen2.5's
/// `start(.*?)end`; Hermes' `start(.*?)end|start(.*)` (the last one may be left open), empty
/// insides skipped.
fn blocks(kind: ParserKind, text: &str) -> Vec<&str> {
    let (start, end) = tags(kind);
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(start) {
        let inside = &rest[at + start.len()..];
        match inside.find(end) {
            Some(stop) => {
                out.push(&inside[..stop]);
                rest = &inside[stop + end.len()..];
            }
            None if kind == ParserKind::Hermes => {
                out.push(inside);
                break;
            }
            None => break,
        }
    }
    out.retain(|b| !b.is_empty() || kind == ParserKind::Qwen25);
    out
}
