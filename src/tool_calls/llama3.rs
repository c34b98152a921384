//! SGLang 0.5.9's `llama3` (`Llama32Detector`): `<|python_tag|>` (or nothing, for a text that
//! starts with `{`) then JSON objects separated by `;`. The content is the text before the tag
//! and what follows the last object read; an object that is not JSON is read as a Python dict,
//! or skipped to the next `{"name":`.

use serde_json::Value;

use super::python_literal::literal_eval;
use super::whole::base_json;
use super::{Parsed, Start};
use crate::reasoning::python_strip;

const TAG: &str = "<|python_tag|>";
/// The separator is skipped as one character after each object, whatever it is.
const SEPARATOR_CHARS: usize = 1;

pub fn has_call(text: &str) -> bool {
    text.contains(TAG) || text.starts_with('{')
}

pub fn start(text: &str) -> Start {
    if text.starts_with('{') {
        return Start::At(0);
    }
    match Start::first_of(text, &[TAG]) {
        // Still nothing: the text may yet start with `{` (it is empty).
        Start::Clear(_) if text.is_empty() => Start::Clear(0),
        found => found,
    }
}

pub fn parse(text: &str, tool_names: &[String]) -> Option<Parsed> {
    let (normal, action) = match text.find(TAG) {
        Some(at) => (&text[..at], &text[at + TAG.len()..]),
        None => ("", text),
    };
    let mut actions = Vec::new();
    let (mut idx, mut safe) = (0, 0);
    while idx < action.len() {
        if let Some((value, end)) = raw_decode(&action[idx..]) {
            actions.push(value);
            idx = skip_chars(action, idx + end, SEPARATOR_CHARS);
            safe = idx;
            continue;
        }
        // Python's fallback: the braces from here counted (strings not minded), and what they
        // hold read as a Python dict.
        if let Some(end) = balanced_braces(&action[idx..]) {
            if let Some(value @ Value::Object(_)) =
                literal_eval(python_strip(&action[idx..idx + end]))
            {
                actions.push(value);
                idx = skip_chars(action, idx + end, SEPARATOR_CHARS);
                safe = idx;
                continue;
            }
        }
        match action[idx..].char_indices().nth(1).and_then(|(next, _)| {
            action[idx + next..]
                .find("{\"name\":")
                .map(|at| idx + next + at)
        }) {
            Some(next) => idx = next,
            None => break,
        }
    }
    let calls = if actions.is_empty() {
        Vec::new()
    } else {
        base_json(Value::Array(actions), tool_names)?
    };
    let trailing = action.get(safe..).map(python_strip).unwrap_or_default();
    Some(Parsed {
        content: format!("{normal}{trailing}"),
        calls,
    })
}

/// Python's `json.JSONDecoder().raw_decode`: one JSON value at the very start (no whitespace
/// skipped), and the byte where it ends.
pub fn raw_decode(text: &str) -> Option<(Value, usize)> {
    if text.starts_with(|c: char| c.is_whitespace()) {
        return None;
    }
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// The end of the first `{…}` whose braces balance, counting every brace.
fn balanced_braces(text: &str) -> Option<usize> {
    let mut depth = 0i64;
    for (i, ch) in text.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `at` moved on by `n` characters (past the end if there are fewer).
fn skip_chars(text: &str, at: usize, n: usize) -> usize {
    match text[at..].char_indices().nth(n) {
        Some((i, _)) => at + i,
        None => text.len() + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["f".into()]
    }

    #[test]
    fn reads_json_and_python_dicts_and_keeps_the_rest_as_content() {
        let p = parse(
            "Hi <|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}};{'name': 'f', 'arguments': {'b': True}} bye",
            &names(),
        );
        let p = p.unwrap_or_default();
        assert_eq!(p.content, "Hi bye");
        let args: Vec<&str> = p.calls.iter().map(|c| c.arguments.as_str()).collect();
        assert_eq!(args, ["{\"a\": 1}", "{\"b\": true}"]);
        // Junk before an object is skipped to the next `{"name":`, and dropped.
        let p = parse("{oops} {\"name\": \"f\", \"arguments\": {}}", &names()).unwrap_or_default();
        assert_eq!((p.content.as_str(), p.calls.len()), ("", 1));
    }

    #[test]
    fn a_call_starts_at_the_tag_or_a_leading_brace() {
        assert_eq!(start(""), Start::Clear(0));
        assert_eq!(start("{"), Start::At(0));
        assert_eq!(start("a <|py"), Start::Clear(2));
        assert_eq!(start("a <|python_tag|>"), Start::At(2));
    }
}
