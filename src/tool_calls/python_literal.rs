//! The part of Python's expression syntax that models write tool calls in: literals (strings in
//! every quoting, numbers, `True`/`False`/`None`, lists, dicts, tuples) as `ast.literal_eval`
//! reads them (Llama 3's Python-dict calls), and a list of calls `[f(a=1), g(b="x")]` as
//! SGLang's pythonic parser reads `ast.parse` (only `ast.Constant`, `ast.List` and `ast.Dict`
//! as argument values). `None` wherever Python raises (a syntax error, a value `json.dumps`
//! cannot write); a few valid but unlikely forms (bytes, f-strings, complex numbers, integers
//! beyond 64 bits, non-string keys other than integers) are refused too.

mod strings;

use serde_json::{Map, Number, Value};

/// `ast.literal_eval(text.strip())`, written as JSON (tuples as lists).
pub fn literal_eval(text: &str) -> Option<Value> {
    let mut c = Cursor::new(text, Mode::LiteralEval);
    let v = c.value()?;
    c.end().then_some(v)
}

/// One call of a pythonic list: the function's name (`None` where it is not a plain name,
/// e.g. `a.b(…)`) and its keyword arguments in order (positional ones are not read).
pub struct Call {
    pub name: Option<String>,
    pub keywords: Map<String, Value>,
}

/// What `ast.parse` gives for `[f(a=1), …]`: `Some(None)` for a valid list with an element that
/// is not a call (SGLang then reads no calls), `None` for text Python refuses.
pub fn call_list(text: &str) -> Option<Option<Vec<Call>>> {
    let mut c = Cursor::new(text, Mode::Ast);
    c.eat('[').then_some(())?;
    let mut calls = Some(Vec::new());
    loop {
        if c.eat(']') {
            break;
        }
        match c.call_or_value()? {
            Some(call) => calls.as_mut().map(|cs| cs.push(call)),
            None => calls.take().map(|_| ()),
        };
        if !c.eat(',') {
            c.eat(']').then_some(())?;
            break;
        }
    }
    c.end().then_some(calls)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `ast.literal_eval`: signs, tuples and any constant key.
    LiteralEval,
    /// SGLang's `_get_parameter_value` over `ast.parse`: constants, lists, dicts only.
    Ast,
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
    mode: Mode,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str, mode: Mode) -> Cursor<'a> {
        Cursor { text, at: 0, mode }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    /// Whitespace and comments (inside brackets newlines are whitespace too).
    fn skip(&mut self) {
        loop {
            let r = self.rest();
            let t = r.trim_start_matches([' ', '\t', '\n', '\r', '\x0c']);
            self.at += r.len() - t.len();
            if t.starts_with('#') {
                self.at += t.find('\n').unwrap_or(t.len());
            } else if let Some(after) = t.strip_prefix("\\\n") {
                self.at += t.len() - after.len();
            } else {
                return;
            }
        }
    }

    fn eat(&mut self, ch: char) -> bool {
        self.skip();
        if self.rest().starts_with(ch) {
            self.at += ch.len_utf8();
            true
        } else {
            false
        }
    }

    fn end(&mut self) -> bool {
        self.skip();
        self.rest().is_empty()
    }

    fn name(&mut self) -> Option<&'a str> {
        self.skip();
        let r = self.rest();
        let first = r.chars().next()?;
        if !(first.is_alphabetic() || first == '_') {
            return None;
        }
        let len = r
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(r.len());
        self.at += len;
        Some(&r[..len])
    }

    /// An element of a pythonic list: `Some(call)`, or `None` for a plain value.
    fn call_or_value(&mut self) -> Option<Option<Call>> {
        self.skip();
        let save = self.at;
        if let Some(mut name) = self.name().map(|n| Some(n.to_owned())) {
            // A dotted name is an `ast.Attribute`: a call SGLang skips.
            while self.eat('.') {
                self.name()?;
                name = None;
            }
            if self.eat('(') {
                return Some(Some(Call {
                    name,
                    keywords: self.arguments()?,
                }));
            }
            self.at = save;
        }
        self.value().map(|_| None)
    }

    /// `(…)` after a call's name: positional arguments, then `name=value` keywords.
    fn arguments(&mut self) -> Option<Map<String, Value>> {
        let mut keywords = Map::new();
        loop {
            if self.eat(')') {
                return Some(keywords);
            }
            let save = self.at;
            match self.name() {
                Some(key) if self.eat('=') && !self.rest().starts_with('=') => {
                    // A repeated keyword is a syntax error.
                    if keywords.insert(key.to_owned(), self.value()?).is_some() {
                        return None;
                    }
                }
                _ => {
                    // Positional (not read, but still Python): none after a keyword.
                    self.at = save;
                    if !keywords.is_empty() {
                        return None;
                    }
                    self.skip();
                    if self.name().is_none() {
                        self.value()?;
                    }
                }
            }
            if !self.eat(',') {
                return self.eat(')').then_some(keywords);
            }
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.skip();
        let r = self.rest();
        let first = r.chars().next()?;
        match first {
            '[' => {
                self.at += 1;
                Some(Value::Array(self.items(']')?))
            }
            '(' => {
                self.at += 1;
                if self.eat(')') {
                    return (self.mode == Mode::LiteralEval).then(|| Value::Array(vec![]));
                }
                let v = self.value()?;
                if self.eat(')') {
                    return Some(v);
                }
                // A tuple: only `literal_eval` takes one.
                if self.mode != Mode::LiteralEval || !self.eat(',') {
                    return None;
                }
                let mut items = vec![v];
                items.extend(self.items(')')?);
                Some(Value::Array(items))
            }
            '{' => {
                self.at += 1;
                self.dict()
            }
            '-' | '+' if self.mode == Mode::LiteralEval => {
                self.at += 1;
                self.skip();
                match self.number()? {
                    Value::Number(n) if first == '-' => negate(&n),
                    v => Some(v),
                }
            }
            '0'..='9' | '.' => self.number(),
            _ => {
                if let Some(s) = self.strings() {
                    return s.map(Value::String);
                }
                match self.name()? {
                    "True" => Some(Value::Bool(true)),
                    "False" => Some(Value::Bool(false)),
                    "None" => Some(Value::Null),
                    _ => None,
                }
            }
        }
    }

    /// Values up to `close`, a trailing comma allowed.
    fn items(&mut self, close: char) -> Option<Vec<Value>> {
        let mut items = Vec::new();
        loop {
            if self.eat(close) {
                return Some(items);
            }
            items.push(self.value()?);
            if !self.eat(',') {
                return self.eat(close).then_some(items);
            }
        }
    }

    fn dict(&mut self) -> Option<Value> {
        let mut map = Map::new();
        loop {
            if self.eat('}') {
                return Some(Value::Object(map));
            }
            // `json.dumps` writes an integer key as its digits; other non-strings are refused.
            let key = match self.value()? {
                Value::String(s) => s,
                Value::Number(n) if !n.is_f64() => n.to_string(),
                _ => return None,
            };
            self.eat(':').then_some(())?;
            map.insert(key, self.value()?);
            if !self.eat(',') {
                return self.eat('}').then_some(Value::Object(map));
            }
        }
    }

    /// A number: decimal, hex, octal or binary integers, floats; `_` between digits.
    fn number(&mut self) -> Option<Value> {
        let r = self.rest();
        let bytes = r.as_bytes();
        let hex = r.starts_with("0x") || r.starts_with("0X");
        let mut len = 0;
        while let Some(&b) = bytes.get(len) {
            // An exponent's sign belongs to the number.
            let sign = matches!(b, b'+' | b'-')
                && !hex
                && len > 0
                && matches!(bytes[len - 1], b'e' | b'E');
            if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || sign) {
                break;
            }
            len += 1;
        }
        let raw = &r[..len];
        self.at += len;
        let clean: String = underscores(raw)?;
        let lower = clean.to_ascii_lowercase();
        for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
            if let Some(digits) = lower.strip_prefix(prefix) {
                return u64::from_str_radix(digits, radix).ok().map(Value::from);
            }
        }
        if lower.bytes().all(|b| b.is_ascii_digit()) {
            // `01` is a syntax error; `00` is zero.
            if lower.len() > 1 && lower.starts_with('0') && lower.bytes().any(|b| b != b'0') {
                return None;
            }
            return lower.parse::<u64>().ok().map(Value::from);
        }
        let ok = lower
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'));
        let f: f64 = if ok { lower.parse().ok()? } else { return None };
        Number::from_f64(f).map(Value::Number)
    }
}

fn underscores(raw: &str) -> Option<String> {
    let b = raw.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_' {
            let ok = |j: Option<&u8>| j.is_some_and(|c| c.is_ascii_alphanumeric());
            if !ok(i.checked_sub(1).and_then(|j| b.get(j))) || !ok(b.get(i + 1)) {
                return None;
            }
        }
    }
    Some(raw.replace('_', ""))
}

fn negate(n: &Number) -> Option<Value> {
    if let Some(u) = n.as_u64() {
        return i64::try_from(u).ok().map(|i| Value::from(-i));
    }
    n.as_f64()
        .and_then(|f| Number::from_f64(-f))
        .map(Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn literals_read_as_python_reads_them() {
        let v = literal_eval(
            "{'name': 'f', 'arguments': {'a': -1, 'b': (1, 2.5), 'c': None, 'd': True, 'e': \"x\\ty\" 'z', 3: 1_000, 'h': 0x1f, 'u': '\\u00e9\\x41\\101'}}",
        );
        assert_eq!(
            v,
            Some(
                json!({"name": "f", "arguments": {"a": -1, "b": [1, 2.5], "c": null, "d": true,
                        "e": "x\tyz", "3": 1000, "h": 31, "u": "éAA"}})
            )
        );
        for bad in [
            "{'a': b'x'}",
            "{'a': 01}",
            "{'a': x}",
            "{'a': 1,",
            "{1, 2}",
            "'a\nb'",
        ] {
            assert_eq!(literal_eval(bad), None, "{bad}");
        }
        assert_eq!(literal_eval("r'a\\n'"), Some(json!("a\\n")));
        assert_eq!(literal_eval("'''a\nb'''"), Some(json!("a\nb")));
        assert_eq!(literal_eval("1e3"), Some(json!(1000.0)));
    }

    #[test]
    fn call_lists_read_as_sglang_reads_ast_parse() {
        let calls = call_list("[f(a=1, b=[{'k': None}]), x.g(c='d'), h()]")
            .flatten()
            .unwrap_or_default();
        let got: Vec<(Option<String>, Value)> = calls
            .into_iter()
            .map(|c| (c.name, Value::Object(c.keywords)))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("f".into()), json!({"a": 1, "b": [{"k": null}]})),
                (None, json!({"c": "d"})),
                (Some("h".into()), json!({})),
            ]
        );
        // Not a call in the list: valid Python, no calls.
        assert!(matches!(call_list("[f(a=1), 2]"), Some(None)));
        for bad in [
            "[f(a=-1)]",
            "[f(a=1, a=2)]",
            "[f(a=1, 2)]",
            "[f(a=(1, 2))]",
            "[f(a=1)",
        ] {
            assert!(call_list(bad).is_none(), "{bad}");
        }
    }
}
