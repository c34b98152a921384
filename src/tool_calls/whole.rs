//! A finished text parsed at once, as SGLang 0.5.9's chat server does for a non-streamed answer
//! (`has_tool_call`, `parse_non_stream`, then `_process_tool_calls`' fallback): a text in which
//! the family's parser sees no call, or reads none, is all content, as it is; otherwise the
//! content and the calls are what the family's `detect_and_parse` gives.

use serde_json::Value;

use super::{
    deepseek, glm45, gpt_oss, kimi_k2, llama3, mistral, pythonic, qwen3_coder, tagged, Parsed,
    ParserKind, Reading, ToolCall,
};
use crate::tokenize::python_json_dumps;

pub fn parse_whole(reading: &Reading, text: &str) -> Parsed {
    let (kind, names) = (reading.kind, reading.tool_names.as_slice());
    if kind == ParserKind::Forced {
        return forced(reading, text);
    }
    let all_content = || Parsed {
        content: text.to_owned(),
        calls: Vec::new(),
    };
    let has_call = match kind {
        // Qwen3-Coder's and GLM-4.5's calls open with the same `<tool_call>`.
        ParserKind::Qwen25 | ParserKind::Hermes | ParserKind::Qwen3Coder | ParserKind::Glm45 => {
            tagged::has_call(kind, text)
        }
        ParserKind::Llama3 => llama3::has_call(text),
        ParserKind::Mistral => mistral::has_call(text),
        ParserKind::Pythonic => pythonic::has_call(text),
        ParserKind::DeepseekV3 | ParserKind::DeepseekV31 => deepseek::has_call(text),
        ParserKind::KimiK2 => kimi_k2::has_call(text),
        ParserKind::GptOss => gpt_oss::has_call(text),
        ParserKind::Forced => false,
    };
    if !has_call {
        return all_content();
    }
    let parsed = match kind {
        ParserKind::Qwen25 | ParserKind::Hermes => tagged::parse(kind, text, names),
        ParserKind::Llama3 => llama3::parse(text, names),
        ParserKind::Mistral => mistral::parse(text, names),
        ParserKind::Pythonic => pythonic::parse(text, names),
        ParserKind::DeepseekV3 | ParserKind::DeepseekV31 => deepseek::parse(kind, text, names),
        ParserKind::KimiK2 => kimi_k2::parse(text),
        ParserKind::Qwen3Coder => qwen3_coder::parse(text, reading),
        ParserKind::GptOss => gpt_oss::parse(text, names),
        ParserKind::Glm45 => glm45::parse(text, reading),
        ParserKind::Forced => None,
    };
    match parsed {
        Some(parsed) if !parsed.calls.is_empty() => parsed,
        // No call read (SGLang's `parse_non_stream`), or its parser raised: the whole text is
        // the answer.
        _ => all_content(),
    }
}

/// A forced choice's output, as SGLang's `_process_tool_calls` reads it: the JSON list of
/// calls; text that is not one (a cut generation) is all content.
fn forced(reading: &Reading, text: &str) -> Parsed {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Array(_)) => match base_json(v, &reading.tool_names) {
            Some(calls) => Parsed {
                content: String::new(),
                calls,
            },
            None => Parsed {
                content: text.to_owned(),
                calls: Vec::new(),
            },
        },
        _ => Parsed {
            content: text.to_owned(),
            calls: Vec::new(),
        },
    }
}

/// SGLang's `parse_base_json`: an object or a list of them; a call to a function the request
/// does not offer (or without a name) is dropped. `None` where Python would raise: an item
/// that is not an object, or a name that cannot be looked up (a non-empty list or object).
pub fn base_json(value: Value, tool_names: &[String]) -> Option<Vec<ToolCall>> {
    let items = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    let mut calls = Vec::new();
    for item in items {
        let Value::Object(mut call) = item else {
            return None;
        };
        let name = match call.get("name") {
            Some(Value::String(name)) if tool_names.contains(name) => name.clone(),
            Some(Value::Array(a)) if !a.is_empty() => return None,
            Some(Value::Object(o)) if !o.is_empty() => return None,
            _ => continue,
        };
        // `act.get("parameters") or act.get("arguments", {})`: Python's truthiness.
        let arguments = match call.remove("parameters").filter(truthy) {
            Some(p) => p,
            None => call
                .remove("arguments")
                .unwrap_or_else(|| Value::Object(Default::default())),
        };
        calls.push(ToolCall {
            name,
            arguments: python_json_dumps(&arguments),
        });
    }
    Some(calls)
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(kind: ParserKind) -> Reading {
        Reading {
            kind,
            tool_names: vec!["get_weather".into()],
            parameters: vec![],
        }
    }

    #[test]
    fn qwen25_reads_blocks_and_drops_what_sglang_drops() {
        let r = reading(ParserKind::Qwen25);
        let text = "Let me check.\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>\nnot json\n</tool_call>\n<tool_call>\n{\"name\":\"other\",\"arguments\":{}}\n</tool_call> after";
        let p = parse_whole(&r, text);
        assert_eq!(p.content, "Let me check.");
        assert_eq!(
            p.calls,
            vec![ToolCall {
                name: "get_weather".into(),
                arguments: "{\"city\": \"Paris\"}".into()
            }]
        );
        assert_eq!(parse_whole(&r, " plain ").content, " plain ");
        // Not an object: SGLang's parser raises, and the text is all content.
        let p = parse_whole(&r, "a <tool_call>\n[1]\n</tool_call>");
        assert_eq!(
            (p.content.as_str(), p.calls.len()),
            ("a <tool_call>\n[1]\n</tool_call>", 0)
        );
    }

    #[test]
    fn a_forced_output_is_the_json_list_of_calls() {
        let r = reading(ParserKind::Forced);
        let p = parse_whole(
            &r,
            r#"[{"name": "get_weather", "parameters": {"city": "Zürich"}}]"#,
        );
        assert_eq!(
            p,
            Parsed {
                content: String::new(),
                calls: vec![ToolCall {
                    name: "get_weather".into(),
                    arguments: "{\"city\": \"Zürich\"}".into()
                }]
            }
        );
        let cut = r#"[{"name": "get_weather", "param"#;
        assert_eq!(parse_whole(&r, cut).content, cut);
    }

    #[test]
    fn hermes_takes_an_open_last_block_and_fails_whole() {
        let r = reading(ParserKind::Hermes);
        let p = parse_whole(
            &r,
            "<tool_call>{\"name\":\"get_weather\",\"parameters\":{\"a\":1}}",
        );
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].arguments, "{\"a\": 1}");
        let bad = "x <tool_call>{\"name\":\"get_weather\"}</tool_call><tool_call>{oops</tool_call>";
        assert_eq!(
            parse_whole(&r, bad),
            Parsed {
                content: bad.into(),
                calls: vec![]
            }
        );
    }
}
