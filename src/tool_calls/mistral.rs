//! SGLang 0.5.9's `mistral` (`MistralDetector`): `[TOOL_CALLS] [{…}, …]` (a JSON list of
//! calls) or the compact `[TOOL_CALLS]name[ARGS]{…}` (one call). The content is the text
//! before the marker and the text after the calls, each stripped, joined by a space.

use serde_json::Value;

use super::whole::base_json;
use super::{Parsed, Start};
use crate::reasoning::python_strip;

const MARKER: &str = "[TOOL_CALLS";
const LIST_START: &str = "[TOOL_CALLS] [";
const ARGS: &str = "[ARGS";

pub fn has_call(text: &str) -> bool {
    text.contains(MARKER)
}

pub fn start(text: &str) -> Start {
    Start::first_of(text, &[MARKER])
}

pub fn parse(text: &str, tool_names: &[String]) -> Option<Parsed> {
    let at = text.find(MARKER)?;
    let normal = python_strip(&text[..at]);
    let tools = &text[at..];
    let (calls, end) = if let Some(list_at) = tools.find(LIST_START) {
        let open = list_at + LIST_START.len() - 1;
        let Some(len) = balanced(&tools[open..], '[', ']') else {
            return Some(content_only(normal));
        };
        let list = &tools[open..open + len];
        let calls = match serde_json::from_str::<Value>(list) {
            Ok(v) => base_json(v, tool_names)?,
            // SGLang logs it and reads no call.
            Err(_) => Vec::new(),
        };
        // `tool_part.find(json_array_str)`: its first occurrence.
        let end = tools.find(list).map_or(tools.len(), |p| p + list.len());
        (calls, end)
    } else {
        let Some((name, args, end)) = compact(tools) else {
            return Some(content_only(normal));
        };
        let call = serde_json::json!({"name": name, "arguments": args});
        (base_json(call, tool_names)?, end)
    };
    let trailing = python_strip(&tools[end..]);
    let content = if trailing.is_empty() {
        normal.to_owned()
    } else {
        python_strip(&format!("{normal} {trailing}")).to_owned()
    };
    Some(Parsed { content, calls })
}

fn content_only(normal: &str) -> Parsed {
    Parsed {
        content: normal.to_owned(),
        calls: Vec::new(),
    }
}

/// `[TOOL_CALLS]name[ARGS]{…}` (the `]`s optional): the name, the arguments and where they end.
fn compact(text: &str) -> Option<(&str, Value, usize)> {
    let mut i = MARKER.len();
    if text[i..].starts_with(']') {
        i += 1;
    }
    i = skip_space(text, i);
    let args_at = i + text[i..].find(ARGS)?;
    let name = python_strip(&text[i..args_at]);
    if name.is_empty() {
        return None;
    }
    let mut j = args_at + ARGS.len();
    if text[j..].starts_with(']') {
        j += 1;
    }
    j = skip_space(text, j);
    let (open, close) = match text[j..].chars().next()? {
        '{' => ('{', '}'),
        '[' => ('[', ']'),
        _ => return None,
    };
    let len = balanced(&text[j..], open, close)?;
    let args = serde_json::from_str(&text[j..j + len]).ok()?;
    Some((name, args, j + len))
}

fn skip_space(text: &str, at: usize) -> usize {
    at + text[at..].len() - text[at..].trim_start().len()
}

/// The length of the bracketed value that `text` starts with, `open` and `close` counted
/// outside JSON strings (a backslash escapes the next character anywhere, as SGLang counts).
fn balanced(text: &str, open: char, close: char) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0i64, false, false);
    for (i, ch) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if ch == '\\' {
            escaped = true;
        } else if ch == '"' {
            in_string = !in_string;
        } else if !in_string && ch == open {
            depth += 1;
        } else if !in_string && ch == close {
            depth -= 1;
            if depth == 0 {
                return Some(i + ch.len_utf8());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_forms_and_joins_the_content_around_them() {
        let names = vec!["f".to_owned()];
        let p = parse(
            "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": \"]\"}}] Done.",
            &names,
        )
        .unwrap_or_default();
        assert_eq!(p.content, "Sure. Done.");
        assert_eq!(p.calls[0].arguments, "{\"a\": \"]\"}");
        let p = parse("[TOOL_CALLS]f[ARGS]{\"b\": [1]}", &names).unwrap_or_default();
        assert_eq!(
            (p.content.as_str(), p.calls[0].arguments.as_str()),
            ("", "{\"b\": [1]}")
        );
    }
}
