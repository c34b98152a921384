//! The minijinja environment that renders HF chat templates the way
//! transformers' jinja2 sandbox does. Compiled once per `Tokenizer`.

mod concat;
mod pyjson;

pub use pyjson::dumps as python_json_dumps;
pub use pyjson::dumps_ascii as python_json_dumps_ascii;
mod strftime;

use crate::tokenize::TokenizeError;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind};
use std::fmt;

const DEFAULT: &str = "default";
const TOOL_USE: &str = "tool_use";
/// The same templates with their joining output blocks split (`concat`), where they have any.
const DEFAULT_SPLIT: &str = "default, split";
const TOOL_USE_SPLIT: &str = "tool_use, split";
/// Messages with less text than this render with the original template: its `+` copies a few
/// hundred bytes for less than the split form's calls cost (0.5 % more instructions for a short
/// chat request, `benches/callgrind.sh nonstream`).
const SPLIT_FROM_BYTES: usize = 1024;

/// How a template expects `message.content` (SGLang's detection, see
/// `content.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// The template concatenates `content` as a string.
    String,
    /// The template iterates over `content` parts (`{"type": "text", ...}`).
    OpenAi,
}

/// A compiled chat template (plus HF's optional `tool_use` variant).
#[derive(Clone)]
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
    has_tool_use: bool,
    /// Whether `DEFAULT_SPLIT` / `TOOL_USE_SPLIT` exist.
    split: [bool; 2],
    content_format: ContentFormat,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("has_tool_use", &self.has_tool_use)
            .field("split", &self.split)
            .field("content_format", &self.content_format)
            .finish()
    }
}

/// Marks an error as coming from the template's own `raise_exception`, so
/// that it can be told apart from a broken template after rendering.
#[derive(Debug)]
struct Raised(String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(
        Error::new(ErrorKind::InvalidOperation, "template raised an exception")
            .with_source(Raised(msg)),
    )
}

impl ChatTemplate {
    /// Compile `source` (and the optional `tool_use` variant that HF picks
    /// when tools are passed).
    pub(crate) fn new(source: String, tool_use: Option<String>) -> Result<Self, TokenizeError> {
        let mut env = Environment::new();
        // HF: jinja2 sandbox with trim_blocks + lstrip_blocks, loopcontrols,
        // no trailing-newline keeping (minijinja's default matches).
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TokenizeError::Template(e.to_string()))?;
        env.set_syntax(syntax);
        // Python str/dict methods (.startswith, .split, .items, .get...).
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", pyjson::tojson_filter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |fmt: String| strftime::strftime_now(&fmt));
        env.add_function(concat::PIECE_FN, concat::piece);

        let content_format = crate::tokenize::content::detect_content_format(&source);
        let mut split = [false; 2];
        split[0] = add_split(&mut env, DEFAULT_SPLIT, &source);
        env.add_template_owned(DEFAULT, source)
            .map_err(|e| TokenizeError::Template(describe(&e)))?;
        let has_tool_use = tool_use.is_some();
        if let Some(src) = tool_use {
            split[1] = add_split(&mut env, TOOL_USE_SPLIT, &src);
            env.add_template_owned(TOOL_USE, src)
                .map_err(|e| TokenizeError::Template(describe(&e)))?;
        }
        Ok(ChatTemplate {
            env,
            has_tool_use,
            split,
            content_format,
        })
    }

    pub(crate) fn content_format(&self) -> ContentFormat {
        self.content_format
    }

    /// Render with a prepared context (messages, tools, special tokens...) whose messages hold
    /// `text_bytes` of text: the split form where there is one and the text is long, and the
    /// original otherwise or where the split form failed (an operand that is not a string, a
    /// raise: the original's to answer).
    pub(crate) fn render(
        &self,
        ctx: Value,
        with_tools: bool,
        text_bytes: usize,
    ) -> Result<String, TokenizeError> {
        let (name, split) = self.names(with_tools);
        let split = split
            .filter(|_| text_bytes >= SPLIT_FROM_BYTES)
            .and_then(|split| self.env.get_template(split).ok());
        if let Some(Ok(out)) = split.map(|t| t.render(ctx.clone())) {
            return Ok(out);
        }
        self.render_named(name, ctx)
    }

    /// The split form alone (an error where there is none).
    #[cfg(test)]
    pub(crate) fn render_split(
        &self,
        ctx: Value,
        with_tools: bool,
    ) -> Result<String, TokenizeError> {
        let (_, split) = self.names(with_tools);
        let split = split.ok_or_else(|| TokenizeError::Template("no split form".into()))?;
        self.render_named(split, ctx)
    }

    /// The template `render` uses, and its split form if there is one.
    fn names(&self, with_tools: bool) -> (&'static str, Option<&'static str>) {
        if with_tools && self.has_tool_use {
            (TOOL_USE, self.split[1].then_some(TOOL_USE_SPLIT))
        } else {
            (DEFAULT, self.split[0].then_some(DEFAULT_SPLIT))
        }
    }

    fn render_named(&self, name: &str, ctx: Value) -> Result<String, TokenizeError> {
        let tmpl = self
            .env
            .get_template(name)
            .map_err(|e| TokenizeError::Template(describe(&e)))?;
        tmpl.render(ctx).map_err(|e| match find_raised(&e) {
            Some(msg) => TokenizeError::TemplateRaised(msg.to_owned()),
            None => TokenizeError::Template(describe(&e)),
        })
    }
}

/// Adds `source` with its joining output blocks split as `name`, if it has any and the result
/// compiles.
fn add_split(env: &mut Environment<'static>, name: &'static str, source: &str) -> bool {
    concat::split_concatenations(source)
        .is_some_and(|split| env.add_template_owned(name, split).is_ok())
}

fn find_raised(e: &Error) -> Option<&str> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<Raised>() {
            return Some(&r.0);
        }
        cur = err.source();
    }
    None
}

/// minijinja's Display has the kind, detail and location, but not the
/// source chain (e.g. a serde error inside `tojson`); add it.
fn describe(e: &Error) -> String {
    let mut msg = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(err) = cur {
        msg.push_str(": ");
        msg.push_str(&err.to_string());
        cur = err.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::context;
    use minijinja::value::Serde;

    fn to_value<T: serde::Serialize>(v: T) -> Value {
        Value::from(Serde(v))
    }

    fn render(src: &str, ctx: Value) -> Result<String, TokenizeError> {
        ChatTemplate::new(src.to_owned(), None)?.render(ctx, false, SPLIT_FROM_BYTES)
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        // Expected string is Python's json.dumps(tool) (ensure_ascii=False).
        let tool: serde_json::Value = serde_json::from_str(
            r#"{"type":"function","function":{"name":"search","description":"Find <b>a & b</b>, it's \"quoted\" — ok","parameters":{"type":"object","properties":{"zeta":{"type":"string","enum":["x<y","a&b"]},"alpha":{"type":"integer","minimum":0.5}},"required":["zeta"]}}}"#,
        )
        .unwrap();
        let out = render("{{ tool | tojson }}", context! { tool => to_value(&tool) }).unwrap();
        let want = r#"{"type": "function", "function": {"name": "search", "description": "Find <b>a & b</b>, it's \"quoted\" — ok", "parameters": {"type": "object", "properties": {"zeta": {"type": "string", "enum": ["x<y", "a&b"]}, "alpha": {"type": "integer", "minimum": 0.5}}, "required": ["zeta"]}}}"#;
        assert_eq!(out, want);

        let out = render(
            "{{ t | tojson(indent=2) }}|{{ t | tojson(separators=(',', ':')) }}|{{ t | tojson(sort_keys=true) }}",
            context! { t => to_value(serde_json::json!({"b": [1, "é"], "a": null})) },
        )
        .unwrap();
        assert_eq!(
            out,
            "{\n  \"b\": [\n    1,\n    \"é\"\n  ],\n  \"a\": null\n}|{\"b\":[1,\"é\"],\"a\":null}|{\"a\": null, \"b\": [1, \"é\"]}"
        );
    }

    #[test]
    fn raise_exception_is_reported_with_its_message() {
        let err = render(
            "{% if x %}{{ raise_exception('Bad role: ' ~ x) }}{% endif %}",
            context! { x => "tool" },
        )
        .unwrap_err();
        match err {
            TokenizeError::TemplateRaised(m) => assert_eq!(m, "Bad role: tool"),
            other => panic!("unexpected {other:?}"),
        }
        let err = render("{{ 1 + }}", context! {}).unwrap_err();
        assert!(matches!(err, TokenizeError::Template(_)), "{err:?}");
    }

    #[test]
    fn a_joining_block_gives_the_original_output_whatever_its_operands() {
        let src = "{{ 'Hi ' + name + '!' }}|{{ a + b }}|{{ a ~ b }}";
        let t = ChatTemplate::new(src.to_owned(), None).unwrap();
        assert_eq!(t.split, [true, false]);
        let ctx = context! { name => "Bo", a => "1", b => "2" };
        assert_eq!(
            t.render(ctx.clone(), false, SPLIT_FROM_BYTES).unwrap(),
            "Hi Bo!|12|12"
        );
        assert_eq!(t.render_split(ctx, false).unwrap(), "Hi Bo!|12|12");
        // Numbers add up: the split form fails on them and the original answers.
        let ctx = context! { name => "Bo", a => 1, b => 2 };
        assert!(t.render_split(ctx.clone(), false).is_err());
        assert_eq!(
            t.render(ctx, false, SPLIT_FROM_BYTES).unwrap(),
            "Hi Bo!|3|12"
        );
        // A string joined to a list fails in both, with the original's error.
        let err = render("{{ 'n: ' + n }}", context! { n => vec![1] }).unwrap_err();
        let TokenizeError::Template(msg) = err else {
            panic!("{err:?}")
        };
        assert!(msg.contains("+"), "{msg}");
        // A raise inside a join is the template's own error, as before.
        let err = render(
            "{{ 'x' + raise_exception('no ' + what) }}",
            context! { what => "tools" },
        );
        assert!(matches!(err, Err(TokenizeError::TemplateRaised(m)) if m == "no tools"));
    }

    #[test]
    fn pycompat_trim_and_loop_controls() {
        let src = "{% for m in ms %}\n  {% if m.startswith('s') %}{% continue %}{% endif %}\n{{ m.upper() }},{% endfor %}";
        let out = render(src, context! { ms => vec!["a", "skip", "b"] }).unwrap();
        assert_eq!(out, "A,B,");
    }

    #[test]
    fn strftime_now_is_available() {
        let out = render("{{ strftime_now('%Y') }}", context! {}).unwrap();
        assert_eq!(out.len(), 4);
        assert!(out.starts_with('2'));
    }
}
