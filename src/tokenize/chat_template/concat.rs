//! Output blocks that join strings with `+` or `~`, emitted piece by piece.
//!
//! Chat templates build each message as `{{ '<|im_start|>' + message['role'] + '\n' +
//! message['content'] + '<|im_end|>' + '\n' }}`. minijinja evaluates that left to right, and
//! every `+` makes a new string and copies it into a new value: a message's content is copied
//! twice by the `+` that adds it and by each one after (six times here), which on a 12 KB
//! prompt was more bytes copied than anything else the gateway did for the request. The same
//! block as `{{ a }}{{ b }}…` writes each piece once, straight into the output.
//!
//! The two are the same output whenever every operand is a string: both operators then
//! concatenate, in order, whatever the grouping. So each operand that is not a string literal
//! is wrapped in [`PIECE_FN`], which passes a string through and fails on anything else; a
//! render of the rewritten template that fails for any reason is done again with the original
//! (`ChatTemplate::render`), so a number added to a number, a string joined to a list, a
//! template that raises, keep the original's answer.
//!
//! The rewrite is done on the source text: only output blocks whose expression is operands
//! joined by `+`/`~` at the top level, each operand free of any other operator (no `if`, `-`,
//! comparisons, …; filters, calls, subscripts and attributes bind tighter than `+` and are
//! fine). Anything else is left as it was.

use minijinja::value::Value;
use minijinja::{Error, ErrorKind};

/// The function a rewritten block wraps each operand in.
pub(super) const PIECE_FN: &str = "__switchboard_piece";

/// [`PIECE_FN`]: a string as it is; anything else fails the render (and the original renders).
pub(super) fn piece(value: Value) -> Result<Value, Error> {
    if value.as_str().is_some() {
        Ok(value)
    } else {
        Err(Error::new(
            ErrorKind::InvalidOperation,
            "not a string (the original template decides)",
        ))
    }
}

/// `source` with its joining output blocks split into one block per operand, or `None` if it
/// has none (or cannot be read with certainty).
pub(super) fn split_concatenations(source: &str) -> Option<String> {
    let mut out = String::with_capacity(source.len() + source.len() / 4);
    let mut changed = false;
    let mut rest = source;
    while let Some(at) = rest.find('{') {
        let (text, tail) = rest.split_at(at);
        out.push_str(text);
        if let Some(body) = tail.strip_prefix("{{") {
            let end = tag_end(body, b'}')?;
            let block = &tail[..2 + end + 2];
            match split_block(&body[..end]) {
                Some(split) => {
                    out.push_str(&split);
                    changed = true;
                }
                None => out.push_str(block),
            }
            rest = &tail[block.len()..];
        } else if let Some(body) = tail.strip_prefix("{#") {
            let end = body.find("#}")?;
            out.push_str(&tail[..2 + end + 2]);
            rest = &tail[2 + end + 2..];
        } else if let Some(body) = tail.strip_prefix("{%") {
            let end = tag_end(body, b'%')?;
            let mut len = 2 + end + 2;
            if tag_name(&body[..end]) == "raw" {
                len += raw_end(&tail[len..])?;
            }
            out.push_str(&tail[..len]);
            rest = &tail[len..];
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// Where the `close` + `}` that ends a tag starts in `body` (what follows its `{{` or `{%`),
/// outside strings and brackets.
fn tag_end(body: &str, close: u8) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' | b'"' => i = string_end(bytes, i)?,
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' => depth = depth.checked_sub(1)?,
            b'}' if depth > 0 => depth -= 1,
            c if c == close && depth == 0 && bytes.get(i + 1) == Some(&b'}') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote closing the string literal that opens at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            c if c == quote => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// A block tag's name: `raw` in `{%- raw %}`.
fn tag_name(body: &str) -> &str {
    let body = body.trim_start_matches(['-', '+']).trim_start();
    let end = body
        .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .unwrap_or(body.len());
    &body[..end]
}

/// The length of a raw block's text up to and including its `{% endraw %}` tag.
fn raw_end(text: &str) -> Option<usize> {
    let mut from = 0;
    loop {
        let at = from + text[from..].find("{%")?;
        let body = &text[at + 2..];
        let end = tag_end(body, b'%')?;
        if tag_name(&body[..end]) == "endraw" {
            return Some(at + 2 + end + 2);
        }
        from = at + 2;
    }
}

/// The output block with this expression (what lies between `{{` and `}}`, whitespace
/// markers included) as one block per operand, or `None` if it is not a join of operands.
fn split_block(inner: &str) -> Option<String> {
    let (open, inner) = match inner.strip_prefix('-') {
        Some(rest) => ("{{-", rest),
        None => ("{{", inner),
    };
    let (inner, close) = match inner.strip_suffix('-') {
        Some(rest) => (rest, "-}}"),
        None => (inner, "}}"),
    };
    // `{{+` and `+}}` are whitespace markers too; blocks with them are left alone.
    if inner.starts_with('+') || inner.ends_with('+') {
        return None;
    }
    let operands = operands(inner)?;
    if operands.len() < 2 {
        return None;
    }
    let mut out = String::with_capacity(inner.len() + operands.len() * (PIECE_FN.len() + 8));
    for (k, operand) in operands.iter().enumerate() {
        out.push_str(if k == 0 { open } else { "{{" });
        out.push(' ');
        if is_string_literal(operand) {
            out.push_str(operand);
        } else {
            out.push_str(PIECE_FN);
            out.push('(');
            out.push_str(operand);
            out.push(')');
        }
        out.push(' ');
        out.push_str(if k + 1 == operands.len() { close } else { "}}" });
    }
    Some(out)
}

/// Words that are operators (or make the expression conditional) where they stand alone.
const KEYWORDS: [&str; 7] = ["if", "else", "and", "or", "not", "in", "is"];

/// `expr` cut at its top-level `+` and `~`, each operand trimmed, or `None` where something
/// else stands at the top level between them (or an operand is empty).
fn operands(expr: &str) -> Option<Vec<&str>> {
    let bytes = expr.as_bytes();
    let mut cuts = Vec::new();
    let mut depth = 0usize;
    let mut after_dot = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'\'' | b'"' => i = string_end(bytes, i)?,
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.checked_sub(1)?,
            _ if depth > 0 => {}
            b'+' | b'~' => cuts.push(i),
            b'.' | b'|' | b'_' => {}
            c if c.is_ascii_whitespace() || c.is_ascii_digit() => {}
            c if c.is_ascii_alphabetic() => {
                let end = bytes[i..]
                    .iter()
                    .position(|b| !b.is_ascii_alphanumeric() && *b != b'_')
                    .map_or(bytes.len(), |n| i + n);
                if !after_dot && KEYWORDS.contains(&&expr[i..end]) {
                    return None;
                }
                i = end - 1;
            }
            _ => return None,
        }
        if !c.is_ascii_whitespace() {
            after_dot = c == b'.';
        }
        i += 1;
    }
    if depth != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        let operand = expr[from..cut].trim();
        if operand.is_empty() {
            return None;
        }
        out.push(operand);
        from = cut + 1;
    }
    Some(out)
}

/// One string literal and nothing else.
fn is_string_literal(operand: &str) -> bool {
    let bytes = operand.as_bytes();
    matches!(bytes.first(), Some(b'\'' | b'"'))
        && string_end(bytes, 0).is_some_and(|end| end + 1 == bytes.len())
}

#[cfg(test)]
mod tests;
