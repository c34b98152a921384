//! A `tojson` filter that writes what Python's `json.dumps` writes, because HF
//! renders templates with that (minijinja's own `tojson` HTML-escapes
//! `< > & '` and uses compact separators, which changes the prompt tokens).

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};
use serde_json::Value as Json;
use std::fmt::Write;

/// Options of `json.dumps` that HF's `tojson` forwards.
pub(crate) struct DumpOptions {
    pub indent: Option<String>,
    pub item_sep: String,
    pub key_sep: String,
    pub sort_keys: bool,
    pub ensure_ascii: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            sort_keys: false,
            ensure_ascii: false,
        }
    }
}

/// `json.dumps(value, ensure_ascii=False)`: what Python code (a template's `tojson`, SGLang's
/// tool-call `arguments`) writes for this value.
pub fn dumps(v: &Json) -> String {
    let mut out = String::new();
    dump(v, &DumpOptions::default(), 0, &mut out);
    out
}

/// `json.dumps(value)` with Python's defaults (`ensure_ascii=True`): how SGLang writes a JSON
/// Schema into a `json_schema` or `structural_tag` sampling parameter.
pub fn dumps_ascii(v: &Json) -> String {
    let opts = DumpOptions {
        ensure_ascii: true,
        ..DumpOptions::default()
    };
    let mut out = String::new();
    dump(v, &opts, 0, &mut out);
    out
}

/// `value | tojson`, `tojson(indent=2)`, `tojson(2)`, `separators=(a, b)`,
/// `sort_keys=true`, `ensure_ascii=true`, as HF's filter accepts.
pub(crate) fn tojson_filter(
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let mut opts = DumpOptions {
        indent: indent_string(indent.as_ref())?,
        ..DumpOptions::default()
    };
    // Python switches the default item separator to "," when indenting.
    if opts.indent.is_some() {
        opts.item_sep = ",".into();
    }
    let seps = kwargs
        .get::<Option<Value>>("separators")?
        .filter(|s| !s.is_none());
    if let Some(seps) = seps {
        let mut it = seps.try_iter()?;
        match (it.next(), it.next(), it.next()) {
            (Some(a), Some(b), None) => {
                opts.item_sep = text_of(&a)?;
                opts.key_sep = text_of(&b)?;
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators must be a pair of strings",
                ));
            }
        }
    }
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    opts.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    kwargs.assert_all_used()?;

    let json = serde_json::to_value(value).map_err(|e| {
        Error::new(ErrorKind::InvalidOperation, "tojson: value is not JSON").with_source(e)
    })?;
    let mut out = String::new();
    dump(&json, &opts, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn text_of(v: &Value) -> Result<String, Error> {
    v.as_str().map(str::to_owned).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidOperation,
            "tojson: separators must be strings",
        )
    })
}

/// Python accepts an int (spaces) or a string as `indent`.
fn indent_string(v: Option<&Value>) -> Result<Option<String>, Error> {
    let Some(v) = v else { return Ok(None) };
    if v.is_none() || v.is_undefined() {
        return Ok(None);
    }
    if let Some(s) = v.as_str() {
        return Ok(Some(s.to_owned()));
    }
    match i64::try_from(v.clone()) {
        Ok(n) => Ok(Some(" ".repeat(n.clamp(0, 64) as usize))),
        Err(_) => Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: indent must be an int or a string",
        )),
    }
}

/// Serialize like `json.dumps(v, ensure_ascii=..., indent=..., separators=...)`.
pub(crate) fn dump(v: &Json, o: &DumpOptions, level: usize, out: &mut String) {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => {
            if n.is_f64() {
                if let Some(f) = n.as_f64() {
                    push_py_float(f, out);
                }
            } else {
                let _ = write!(out, "{n}");
            }
        }
        Json::String(s) => push_str_literal(s, o.ensure_ascii, out),
        Json::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(o, level + 1, out);
                dump(item, o, level + 1, out);
            }
            newline(o, level, out);
            out.push(']');
        }
        Json::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            let mut entries: Vec<(&String, &Json)> = map.iter().collect();
            if o.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(o, level + 1, out);
                push_str_literal(k, o.ensure_ascii, out);
                out.push_str(&o.key_sep);
                dump(val, o, level + 1, out);
            }
            newline(o, level, out);
            out.push('}');
        }
    }
}

fn newline(o: &DumpOptions, level: usize, out: &mut String) {
    if let Some(ind) = &o.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

/// Python escapes only `"`, `\` and control characters (plus non-ASCII when
/// `ensure_ascii`), with lowercase hex.
fn push_str_literal(s: &str, ensure_ascii: bool, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, exponent form when
/// the decimal exponent is < -4 or >= 16, otherwise fixed with at least ".0".
fn push_py_float(f: f64, out: &mut String) {
    if !f.is_finite() {
        out.push_str(if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        });
        return;
    }
    let sci = format!("{f:e}"); // e.g. "-1.25e-7", "1e20"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let fixed = format!("{f}");
        out.push_str(&fixed);
        if !fixed.contains('.') {
            out.push_str(".0");
        }
    } else {
        out.push_str(mantissa);
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", exp.unsigned_abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(text: &str) -> String {
        dumps(&serde_json::from_str(text).unwrap_or(Json::Null))
    }

    /// As SGLang writes a tool call's `arguments`: Python's separators, key order kept,
    /// non-ASCII as it is, integers beyond f64 exact.
    #[test]
    fn writes_as_python_json_dumps() {
        assert_eq!(
            py(r#"{"b":1,"a":[true,null,{"x":"y"}]}"#),
            r#"{"b": 1, "a": [true, null, {"x": "y"}]}"#
        );
        assert_eq!(
            py(r#""\u00e9\/\"\\\n\u0001\u007f""#),
            "\"é/\\\"\\\\\\n\\u0001\u{7f}\""
        );
        assert_eq!(
            py("[1.0, 1.5, -0.0, 1e5, 1e16, 1.5e-7, 0.0001, 123456789012345678]"),
            "[1.0, 1.5, -0.0, 100000.0, 1e+16, 1.5e-07, 0.0001, 123456789012345678]"
        );
    }

    #[test]
    fn floats_like_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (123456789012345.6, "123456789012345.6"),
        ];
        for (f, want) in cases {
            assert_eq!(dumps(&serde_json::json!(f)), want, "{f}");
        }
    }

    #[test]
    fn escapes_like_python() {
        let v = serde_json::json!({"a": "<b> & 'c' \"d\" \\ \n\u{1} é 🦙"});
        assert_eq!(dumps(&v), r#"{"a": "<b> & 'c' \"d\" \\ \n\u0001 é 🦙"}"#);
        let mut s = String::new();
        let o = DumpOptions {
            ensure_ascii: true,
            ..DumpOptions::default()
        };
        dump(&serde_json::json!("é🦙"), &o, 0, &mut s);
        assert_eq!(s, r#""\u00e9\ud83e\udd99""#);
    }

    #[test]
    fn indent_like_python() {
        let v = serde_json::json!({"a": [1, {}], "b": []});
        let o = DumpOptions {
            indent: Some("  ".into()),
            item_sep: ",".into(),
            ..DumpOptions::default()
        };
        let mut s = String::new();
        dump(&v, &o, 0, &mut s);
        assert_eq!(s, "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    }
}
