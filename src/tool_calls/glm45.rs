//! SGLang 0.5.9's `glm45` (`Glm4MoeDetector`, GLM-4.5/4.6): XML-like calls,
//! `<tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>` (the newline
//! may be a literal `\n`). Each value is read as JSON, as escaped JSON, as a Python literal, else
//! as text, then fitted to the type the tool's schema gives the argument
//! (`infer_type_from_json_schema`): the request's parameter schemas ride in the [`Reading`].
//! Calls to functions the request does not offer are dropped; the content is the text before
//! the first `<tool_call>`, stripped.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Map, Value};

use super::python_literal::literal_eval;
use super::whole::base_json;
use super::{Parsed, Reading};
use crate::reasoning::python_strip;
use crate::tokenize::python_json_dumps;

const CALL_BEGIN: &str = "<tool_call>";

/// SGLang's `func_call_regex`, `func_detail_regex` and `func_arg_regex`.
static CALL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<tool_call>.*?</tool_call>").ok());
static DETAIL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>").ok());
static ARG: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?s)<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>").ok()
});

pub fn parse(text: &str, reading: &Reading) -> Option<Parsed> {
    let first = text.find(CALL_BEGIN)?;
    let (call, detail, arg) = (CALL.as_ref()?, DETAIL.as_ref()?, ARG.as_ref()?);
    let mut calls = Vec::new();
    for found in call.find_iter(text) {
        let Some(d) = detail.captures(found.as_str()) else {
            continue;
        };
        let name = d.get(1).map_or("", |m| m.as_str());
        let body = d.get(2).map_or("", |m| m.as_str());
        let mut arguments = Map::new();
        for pair in arg.captures_iter(body) {
            let key = python_strip(pair.get(1).map_or("", |m| m.as_str()));
            let value = python_strip(pair.get(2).map_or("", |m| m.as_str()));
            let kind = reading
                .parameters_of(name)
                .and_then(|p| p.get("properties"))
                .and_then(|p| p.get(key))
                .and_then(infer_type);
            arguments.insert(
                key.to_owned(),
                fit(read_value(value, kind.as_deref()), kind),
            );
        }
        calls.extend(base_json(
            json!({"name": name, "parameters": arguments}),
            &reading.tool_names,
        )?);
    }
    Some(Parsed {
        content: python_strip(&text[..first]).to_owned(),
        calls,
    })
}

/// SGLang's `parse_arguments`: JSON, JSON escaped inside a string, a Python literal, or the text.
fn read_value(value: &str, kind: Option<&str>) -> Value {
    let number = |v: Value| match (&v, kind) {
        (Value::String(s), Some("number")) => to_number(s).unwrap_or(v),
        _ => v,
    };
    if let Ok(v) = serde_json::from_str::<Value>(value) {
        return number(v);
    }
    let wrapped = format!("{{\"tmp\": \"{value}\"}}");
    let unescaped = serde_json::from_str::<Value>(&wrapped)
        .ok()
        .and_then(|w| w["tmp"].as_str().map(str::to_owned))
        .and_then(|inner| serde_json::from_str::<Value>(&inner).ok());
    if let Some(v) = unescaped {
        return number(v);
    }
    literal_eval(value).unwrap_or_else(|| Value::String(value.to_owned()))
}

/// The value as the schema's type wants it: a `string` argument gets text (JSON text for a list
/// or an object, Python's `str()` for the rest); any other type keeps the value read.
fn fit(value: Value, kind: Option<String>) -> Value {
    if kind.as_deref() != Some("string") {
        return value;
    }
    Value::String(match value {
        Value::String(s) => s,
        v @ (Value::Array(_) | Value::Object(_)) => python_json_dumps(&v),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        n @ Value::Number(_) => python_json_dumps(&n),
    })
}

/// SGLang's `_convert_to_number`: a float with `.` or `e`, else an integer; else `None`.
fn to_number(s: &str) -> Option<Value> {
    let t = python_strip(s);
    if s.contains('.') || s.to_lowercase().contains('e') {
        let f: f64 = t.replace('_', "").parse().ok()?;
        return serde_json::Number::from_f64(f).map(Value::Number);
    }
    t.replace('_', "").parse::<i64>().ok().map(Value::from)
}

/// SGLang's `infer_type_from_json_schema`: the argument's type as the schema says it.
fn infer_type(schema: &Value) -> Option<String> {
    let schema = schema.as_object()?;
    match schema.get("type") {
        Some(Value::String(t)) => return Some(t.clone()),
        Some(Value::Array(types)) if !types.is_empty() => {
            let first = types.iter().find(|t| t.as_str() != Some("null"));
            // Python's `[t for t in types if t != "null"][0]`, whatever it is.
            return Some(first.map_or("string".into(), |t| match t {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }));
        }
        _ => {}
    }
    let any = match (schema.get("anyOf"), schema.get("oneOf")) {
        (Some(a), _) if truthy_list(a) => Some(a),
        (_, Some(o)) => Some(o),
        (Some(a), None) => Some(a),
        (None, None) => None,
    };
    if let Some(Value::Array(subs)) = any {
        let types: Vec<String> = subs.iter().filter_map(infer_type).collect();
        if let Some(first) = types.first() {
            if types.iter().all(|t| t == first) || !types.iter().any(|t| t == "string") {
                return Some(first.clone());
            }
            return Some("string".into());
        }
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        let mut kinds: Vec<&str> = values.iter().map(enum_type).collect();
        kinds.sort_unstable();
        kinds.dedup();
        return Some(match kinds.as_slice() {
            [one] => (*one).to_owned(),
            _ => "string".to_owned(),
        });
    }
    if let Some(Value::Array(subs)) = schema.get("allOf") {
        let typed = subs.iter().filter_map(infer_type).find(|t| t != "string");
        return Some(typed.unwrap_or_else(|| "string".into()));
    }
    if schema.contains_key("properties") {
        return Some("object".into());
    }
    schema.contains_key("items").then(|| "array".into())
}

fn truthy_list(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false)) && v.as_array().is_none_or(|a| !a.is_empty())
}

fn enum_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_calls::ParserKind;

    #[test]
    fn values_read_and_fitted_to_their_schema() {
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "string"}, "n": {"type": "number"}, "o": {"properties": {}}}});
        let reading = Reading {
            kind: ParserKind::Glm45,
            tool_names: vec!["f".into()],
            parameters: vec![schema.as_object().cloned()],
        };
        let text = "Hi <tool_call>f\n<arg_key>s</arg_key>\n<arg_value>42</arg_value>\n<arg_key>n</arg_key><arg_value>\"7\"</arg_value><arg_key>o</arg_key><arg_value>{\\\"a\\\": 1}</arg_value><arg_key>x</arg_key><arg_value>True</arg_value>\n</tool_call>";
        let p = parse(text, &reading).unwrap_or_default();
        assert_eq!(p.content, "Hi");
        assert_eq!(
            p.calls[0].arguments,
            r#"{"s": "42", "n": 7, "o": {"a": 1}, "x": true}"#
        );
    }
}
