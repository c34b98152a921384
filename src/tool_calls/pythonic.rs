//! SGLang 0.5.9's `pythonic` (`PythonicDetector`, Llama 4's format): a Python list of calls,
//! `[get_weather(city="Paris"), search(q="x")]`, found with SGLang's own regular expression in
//! the stripped text (`<|python_start|>`/`<|python_end|>` removed) and read as `ast.parse`
//! reads it. The content is the text around the list. An argument that is not a literal (a
//! negative number is `-` applied to one, for `ast`) makes SGLang read no call at all.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::python_literal::call_list;
use super::{Parsed, Start, ToolCall};
use crate::reasoning::python_strip;
use crate::tokenize::python_json_dumps;

/// SGLang's `tool_call_regex`, as it is (DOTALL); leftmost-first like Python's `re`, so the
/// span it finds is the same.
static CALLS: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?s)\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    )
    .ok()
});

const PYTHON_START: &str = "<|python_start|>";
const PYTHON_END: &str = "<|python_end|>";

fn cleaned(text: &str) -> String {
    python_strip(text)
        .replace(PYTHON_START, "")
        .replace(PYTHON_END, "")
}

fn find(text: &str) -> Option<(usize, usize)> {
    CALLS.as_ref()?.find(text).map(|m| (m.start(), m.end()))
}

pub fn has_call(text: &str) -> bool {
    find(&cleaned(text)).is_some()
}

/// A list may open at any `[`: what follows is held until the end.
pub fn start(text: &str) -> Start {
    Start::first_of(text, &["[", PYTHON_START])
}

pub fn parse(text: &str, tool_names: &[String]) -> Option<Parsed> {
    let text = cleaned(text);
    let (from, to) = find(&text)?;
    let content = format!("{}{}", &text[..from], &text[to..]);
    // Python refuses it, or a list element is not a call: no calls.
    let Some(Some(calls)) = call_list(&text[from..to]) else {
        return Some(Parsed {
            content,
            calls: Vec::new(),
        });
    };
    let calls = calls
        .into_iter()
        .filter_map(|call| {
            let name = call.name.filter(|n| tool_names.contains(n))?;
            Some(ToolCall {
                name,
                arguments: python_json_dumps(&Value::Object(call.keywords)),
            })
        })
        .collect();
    Some(Parsed { content, calls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_list_and_keeps_the_text_around_it() {
        let names = vec!["f".to_owned()];
        let p = parse(
            " Sure: [f(a='x', b=[1, {'c': None}]), g(z=1)] ok \n",
            &names,
        );
        let p = p.unwrap_or_default();
        assert_eq!(p.content, "Sure:  ok");
        assert_eq!(p.calls.len(), 1);
        assert_eq!(
            p.calls[0].arguments,
            "{\"a\": \"x\", \"b\": [1, {\"c\": null}]}"
        );
        assert!(!has_call("a list [1, 2] is not a call"));
        let neg = parse("[f(a=-1)]", &names).unwrap_or_default();
        assert!(neg.calls.is_empty());
    }
}
