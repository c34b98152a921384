//! JSON written as Python's `json.dumps(value, ensure_ascii=False)` writes it — how SGLang
//! writes a call's `arguments` — so a client sees the same string from either: `", "` and
//! `": "` between items, non-ASCII as it is, floats as Python's `repr`.

use std::fmt::Write;

use serde_json::{Number, Value};

pub fn dumps(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(out, k);
                out.push_str(": ");
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// Python's escapes with `ensure_ascii=False`: only `"`, `\` and control characters.
fn write_string(out: &mut String, s: &str) {
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
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_number(out: &mut String, n: &Number) {
    match n.as_f64().filter(|_| n.is_f64()) {
        Some(f) => out.push_str(&float_repr(f)),
        None => {
            let _ = write!(out, "{n}");
        }
    }
}

/// Python's `repr(float)`: the shortest digits that read back the same, in positional notation
/// for decimal exponents -4..16, else as `d.ddde+XX`.
fn float_repr(f: f64) -> String {
    // Rust's `{:e}` gives the same shortest digits: "1.5e-7", "-1e16".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.push_str(&"0".repeat(int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(text: &str) -> String {
        dumps(&serde_json::from_str(text).unwrap_or(Value::Null))
    }

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
}
