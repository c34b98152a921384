//! SGLang 0.5.9's `qwen3_coder` (`Qwen3CoderDetector`): XML-like calls,
//! `<tool_call>\n<function=name>\n<parameter=key>\nvalue\n</parameter>\n</function>\n</tool_call>`.
//! Each value is text, typed by the tool's JSON schema (`_convert_param_value`): the request's
//! parameter schemas ride in the [`Reading`]. The function's name is not checked against the
//! tools (SGLang keeps unknown ones, their values as strings); the content is the text before
//! the first `<tool_call>`, as it is.

use serde_json::{Map, Number, Value};

use super::python_literal::literal_eval;
use super::{Parsed, Reading, ToolCall};
use crate::reasoning::python_strip;
use crate::tokenize::python_json_dumps;

const CALL_BEGIN: &str = "<tool_call>";
const CALL_END: &str = "</tool_call>";
const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

pub fn parse(text: &str, reading: &Reading) -> Option<Parsed> {
    let first = text.find(CALL_BEGIN)?;
    // SGLang's `<tool_call>(.*?)</tool_call>` blocks; none closed but a function written:
    // the whole text is read for functions.
    let mut blocks = closed_blocks(text);
    if blocks.is_empty() && text.contains(FUNCTION) {
        blocks.push(text);
    }
    let mut calls = Vec::new();
    for block in blocks {
        for body in functions(block) {
            let Some((name, params)) = body.split_once('>') else {
                continue;
            };
            let config = arguments_config(reading, name);
            let mut arguments = Map::new();
            for raw in parameters(params) {
                let Some((key, value)) = raw.split_once('>') else {
                    continue;
                };
                let value = value.strip_prefix('\n').unwrap_or(value);
                let value = value.strip_suffix('\n').unwrap_or(value);
                arguments.insert(key.to_owned(), convert(value, key, config));
            }
            calls.push(ToolCall {
                name: name.to_owned(),
                arguments: python_json_dumps(&Value::Object(arguments)),
            });
        }
    }
    Some(Parsed {
        content: text[..first].to_owned(),
        calls,
    })
}

fn closed_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(CALL_BEGIN) {
        let inside = &rest[at + CALL_BEGIN.len()..];
        let Some(stop) = inside.find(CALL_END) else {
            break;
        };
        out.push(&inside[..stop]);
        rest = &inside[stop + CALL_END.len()..];
    }
    out
}

/// SGLang's `<function=(.*?)</function>|<function=(.*)$`: each function's body, the last one
/// running to the end when it is not closed.
fn functions(block: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = block;
    while let Some(at) = rest.find(FUNCTION) {
        let inside = &rest[at + FUNCTION.len()..];
        match inside.find(FUNCTION_END) {
            Some(stop) => {
                out.push(&inside[..stop]);
                rest = &inside[stop + FUNCTION_END.len()..];
            }
            None => {
                out.push(inside);
                break;
            }
        }
    }
    out
}

/// SGLang's `<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)`: a value
/// ends at its closing tag, the next parameter, the function's end, or the end of the text
/// (Python's `$` also matches before a final newline).
fn parameters(params: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = params;
    while let Some(at) = rest.find(PARAMETER) {
        let inside = &rest[at + PARAMETER.len()..];
        let dollar = match inside.strip_suffix('\n') {
            Some(s) => s.len(),
            None => inside.len(),
        };
        let close = inside.find(PARAMETER_END);
        let stop = [close, inside.find(PARAMETER), inside.find(FUNCTION_END)]
            .into_iter()
            .flatten()
            .fold(dollar, usize::min);
        out.push(&inside[..stop]);
        let consumed = if close == Some(stop) {
            stop + PARAMETER_END.len()
        } else {
            stop
        };
        rest = &inside[consumed..];
    }
    out
}

/// SGLang's `_get_arguments_config`: the named tool's `properties`, else its whole schema,
/// else nothing.
fn arguments_config<'a>(reading: &'a Reading, name: &str) -> Option<&'a Map<String, Value>> {
    let schema = reading.parameters_of(name)?;
    match schema.get("properties") {
        Some(Value::Object(properties)) => Some(properties),
        // A `properties` that is not an object: SGLang's lookups fail; nothing is typed.
        Some(_) => None,
        None => Some(schema),
    }
}

/// SGLang's `_convert_param_value`: the value as its declared type, or as text where it does
/// not read as one.
fn convert(value: &str, key: &str, config: Option<&Map<String, Value>>) -> Value {
    let text = || Value::String(value.to_owned());
    if value.to_lowercase() == "null" {
        return Value::Null;
    }
    let Some(declared) = config.and_then(|c| c.get(key)) else {
        return text();
    };
    // `str(type).strip().lower()`; a type that is not a string names no kind below.
    let kind = match declared.get("type") {
        Some(Value::String(t)) => python_strip(t).to_lowercase(),
        Some(_) => String::from("\0"),
        None => String::from("string"),
    };
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| kind.starts_with(p));
    if ["string", "str", "text", "varchar", "char", "enum"].contains(&kind.as_str()) {
        return text();
    }
    if starts(&["int", "uint", "long", "short", "unsigned"]) {
        return python_int(value).map_or_else(text, Value::from);
    }
    if starts(&["num", "float"]) {
        let Some(f) = python_float(value) else {
            return text();
        };
        let integral = !value.contains('.') && !value.to_lowercase().contains('e');
        if integral && f.fract() == 0.0 && f.abs() < 9.2e18 {
            return Value::from(f as i64);
        }
        return Number::from_f64(f).map_or_else(text, Value::Number);
    }
    if ["boolean", "bool", "binary"].contains(&kind.as_str()) {
        return Value::Bool(value.to_lowercase() == "true");
    }
    if ["object", "array", "arr"].contains(&kind.as_str()) || starts(&["dict", "list"]) {
        if let Ok(v) = serde_json::from_str::<Value>(value) {
            return v;
        }
    }
    literal_eval(value).unwrap_or_else(text)
}

/// Python's `int(text)`: surrounding whitespace, a sign, digits with single underscores
/// between them (within 64 bits here).
fn python_int(value: &str) -> Option<i64> {
    let (sign, rest) = split_sign(python_strip(value));
    format!("{sign}{}", digits(rest)?).parse().ok()
}

/// Python's `float(text)` for finite decimal numbers (infinities and NaN are not JSON).
fn python_float(value: &str) -> Option<f64> {
    let (sign, text) = split_sign(python_strip(value));
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let part = |p: &str| {
        if p.is_empty() {
            Some(String::new())
        } else {
            digits(p)
        }
    };
    let (whole, fraction) = (part(whole)?, part(fraction)?);
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut out = format!("{sign}{whole}.{fraction}0");
    if let Some(e) = exponent {
        let (e_sign, e) = split_sign(e);
        out = format!("{out}e{e_sign}{}", digits(e)?);
    }
    out.parse::<f64>().ok().filter(|f| f.is_finite())
}

fn split_sign(text: &str) -> (&str, &str) {
    match text.strip_prefix(['+', '-']) {
        Some(rest) => (&text[..1], rest),
        None => ("", text),
    }
}

/// ASCII digits with single underscores between them, the underscores dropped.
fn digits(text: &str) -> Option<String> {
    let ok = text
        .split('_')
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
    ok.then(|| text.replace('_', ""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_calls::ParserKind;
    use serde_json::json;

    fn reading() -> Reading {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"},
            "o": {"type": "object"}, "s": {"type": "string"}}});
        Reading {
            kind: ParserKind::Qwen3Coder,
            tool_names: vec!["f".into()],
            parameters: vec![schema.as_object().cloned()],
        }
    }

    #[test]
    fn values_take_their_schema_types() {
        let text = "Hi\n<tool_call>\n<function=f>\n<parameter=n>\n1_0\n</parameter>\n<parameter=x>\n3\n</parameter>\n<parameter=b>\nTrue\n</parameter>\n<parameter=o>\n{\"a\": [1]}\n</parameter>\n<parameter=s>\n 42 \n</parameter>\n<parameter=u>\nnull\n</parameter>\n</function>\n</tool_call>";
        let p = parse(text, &reading()).unwrap_or_default();
        assert_eq!(p.content, "Hi\n");
        assert_eq!(
            p.calls[0].arguments,
            r#"{"n": 10, "x": 3, "b": true, "o": {"a": [1]}, "s": " 42 ", "u": null}"#
        );
    }

    #[test]
    fn an_unclosed_value_runs_to_the_next_tag_or_the_end() {
        let text = "<tool_call>\n<function=g>\n<parameter=a>\n1\n<parameter=b>\n2\n";
        let p = parse(text, &reading()).unwrap_or_default();
        assert_eq!(p.calls[0].name, "g");
        assert_eq!(p.calls[0].arguments, r#"{"a": "1", "b": "2"}"#);
    }

    #[test]
    fn python_numbers() {
        assert_eq!(python_int(" -1_000 "), Some(-1000));
        assert_eq!(python_int("1__0"), None);
        assert_eq!(python_float("1e3"), Some(1000.0));
        assert_eq!(python_float(".5"), Some(0.5));
        assert_eq!(python_float("5."), Some(5.0));
        assert_eq!(python_float("."), None);
        assert_eq!(python_float("abc"), None);
    }
}
