//! Turning OpenAI chat messages into what HF templates expect.
//!
//! What SGLang does (python/sglang/srt/parser/jinja_template_utils.py), and
//! what we copy so that the gateway's prompt is the one the worker would build:
//! - It detects once per template whether the template loops over
//!   `message['content']` (or `msg.content` / `m.content`), or mentions
//!   image/audio/video/vision anywhere: such templates get "openai" format
//!   (content stays a list of `{"type": "text", "text": ...}` parts); all
//!   others get "string" format, where text parts are joined with ONE SPACE
//!   (not "\n", unlike vLLM; HF itself passes content through untouched).
//! - Keys whose value is null are dropped from every message, so templates
//!   see them as undefined (`content: null` next to `tool_calls`).
//!
//! This gateway is text-only: any non-text part is an error (a 400), whereas
//! SGLang would drop it (string format) or forward it as media.

use crate::tokenize::chat_template::ContentFormat;
use crate::tokenize::TokenizeError;
use serde_json::{Map, Value as Json};
use std::borrow::Cow;

/// SGLang's detection, done on the source text because minijinja does not
/// expose its AST: a `{% for ... in <msg>.content %}` / `<msg>['content']`
/// loop (optionally followed by a filter or slice), or a media keyword.
pub(crate) fn detect_content_format(source: &str) -> ContentFormat {
    if ["image", "audio", "video", "vision"]
        .iter()
        .any(|k| source.contains(k))
    {
        return ContentFormat::OpenAi;
    }
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let body_start = start + 2;
        let Some(len) = rest[body_start..].find("%}") else {
            break;
        };
        let stmt = rest[body_start..body_start + len]
            .trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        if iterates_content(stmt) {
            return ContentFormat::OpenAi;
        }
        rest = &rest[body_start + len + 2..];
    }
    ContentFormat::String
}

fn iterates_content(stmt: &str) -> bool {
    let Some(after_for) = stmt.strip_prefix("for") else {
        return false;
    };
    if !after_for.starts_with(char::is_whitespace) {
        return false;
    }
    let Some(in_at) = after_for.find(" in ") else {
        return false;
    };
    let iter = after_for[in_at + 4..].trim_start();
    ["message", "msg", "m"].iter().any(|var| {
        let Some(tail) = iter.strip_prefix(var) else {
            return false;
        };
        let tail = tail.trim_start();
        let Some(tail) = [".content", "['content']", "[\"content\"]"]
            .iter()
            .find_map(|acc| tail.strip_prefix(acc))
        else {
            return false;
        };
        // `message.contents` or `message.content_type` is something else.
        !tail.starts_with(|c: char| c.is_alphanumeric() || c == '_')
    })
}

/// One message as the template should see it; borrowed when nothing changes.
pub(crate) fn normalize_message(
    msg: &Json,
    format: ContentFormat,
) -> Result<Cow<'_, Json>, TokenizeError> {
    let Json::Object(obj) = msg else {
        return Ok(Cow::Borrowed(msg));
    };
    let content_is_list = matches!(obj.get("content"), Some(Json::Array(_)));
    let has_null = obj.values().any(Json::is_null);
    if !content_is_list && !has_null {
        return Ok(Cow::Borrowed(msg));
    }
    let mut out = Map::with_capacity(obj.len());
    for (k, v) in obj {
        match v {
            Json::Null => {}
            Json::Array(parts) if k == "content" => {
                out.insert(k.clone(), normalize_parts(parts, format)?);
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(Cow::Owned(Json::Object(out)))
}

fn normalize_parts(parts: &[Json], format: ContentFormat) -> Result<Json, TokenizeError> {
    let mut texts: Vec<&str> = Vec::with_capacity(parts.len());
    for part in parts {
        let kind = part.get("type").and_then(Json::as_str).ok_or_else(|| {
            TokenizeError::UnsupportedContent("content part without a `type`".into())
        })?;
        match kind {
            "text" | "input_text" => {
                let text = part.get("text").and_then(Json::as_str).ok_or_else(|| {
                    TokenizeError::UnsupportedContent(format!(
                        "`{kind}` content part without a string `text`"
                    ))
                })?;
                texts.push(text);
            }
            other => {
                return Err(TokenizeError::UnsupportedContent(format!(
                    "content parts of type `{other}` are not supported (text only)"
                )));
            }
        }
    }
    Ok(match format {
        ContentFormat::String => Json::String(texts.join(" ")),
        ContentFormat::OpenAi => Json::Array(
            texts
                .into_iter()
                .map(|t| {
                    let mut m = Map::with_capacity(2);
                    m.insert("type".into(), Json::String("text".into()));
                    m.insert("text".into(), Json::String(t.to_owned()));
                    Json::Object(m)
                })
                .collect(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn detects_content_loops() {
        use ContentFormat::*;
        assert_eq!(detect_content_format("{{ message['content'] }}"), String);
        assert_eq!(
            detect_content_format("{%- for block in  message['content'] %}x{% endfor %}"),
            OpenAi
        );
        assert_eq!(
            detect_content_format("{% for c in m.content | selectattr('type') %}{% endfor %}"),
            OpenAi
        );
        assert_eq!(
            detect_content_format("{% for c in message.contents %}{% endfor %}"),
            String
        );
        assert_eq!(detect_content_format("<|vision_start|>"), OpenAi);
    }

    #[test]
    fn text_parts_join_with_space_for_string_templates() {
        let m = json!({"role": "user", "name": null, "content": [
            {"type": "text", "text": "Hello"}, {"type": "input_text", "text": "world"}]});
        let n = normalize_message(&m, ContentFormat::String).unwrap();
        assert_eq!(*n, json!({"role": "user", "content": "Hello world"}));
        let n = normalize_message(&m, ContentFormat::OpenAi).unwrap();
        assert_eq!(
            *n,
            json!({"role": "user", "content": [
                {"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]})
        );
        let plain = json!({"role": "user", "content": "hi"});
        assert!(matches!(
            normalize_message(&plain, ContentFormat::String).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn non_text_parts_are_rejected() {
        for part in [
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}),
            json!({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}),
            json!({"text": "no type"}),
            json!({"type": "text"}),
        ] {
            let m = json!({"role": "user", "content": [{"type": "text", "text": "x"}, part]});
            let err = normalize_message(&m, ContentFormat::String).unwrap_err();
            assert!(
                matches!(err, TokenizeError::UnsupportedContent(_)),
                "{err:?}"
            );
        }
    }
}
