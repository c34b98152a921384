//! SGLang 0.5.9's `deepseekv3` (`DeepSeekV3Detector`) and `deepseekv31`
//! (`DeepSeekV31Detector`): calls between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`,
//! each `<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>` — V3 `function<｜tool▁sep｜>name` then the
//! arguments in a ```` ```json ```` block, V3.1 `name<｜tool▁sep｜>{arguments}`. The content is
//! the text before the first call, stripped; a call that does not read makes it all content.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Value};

use super::whole::base_json;
use super::{Parsed, ParserKind, Start};
use crate::reasoning::python_strip;

const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";

/// SGLang's `func_call_regex`, and each version's `func_detail_regex` (name, arguments).
static CALL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>").ok());
static DETAIL_V3: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?s)<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>",
    )
    .ok()
});
static DETAIL_V31: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?s)<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)<｜tool▁call▁end｜>").ok()
});

pub fn has_call(text: &str) -> bool {
    text.contains(CALLS_BEGIN)
}

pub fn start(text: &str) -> Start {
    Start::first_of(text, &[CALLS_BEGIN])
}

pub fn parse(kind: ParserKind, text: &str, tool_names: &[String]) -> Option<Parsed> {
    let first = text.find(CALLS_BEGIN)?;
    let (detail, name_at, args_at) = match kind {
        ParserKind::DeepseekV3 => (&DETAIL_V3, 2, 3),
        _ => (&DETAIL_V31, 1, 2),
    };
    let (call, detail) = (CALL.as_ref()?, detail.as_ref()?);
    let mut calls = Vec::new();
    for found in call.find_iter(text) {
        // No match, or arguments that are not JSON: SGLang's parser raises.
        let d = detail.captures(found.as_str())?;
        let args: Value = serde_json::from_str(d.get(args_at)?.as_str()).ok()?;
        let name = d.get(name_at)?.as_str();
        calls.extend(base_json(
            json!({"name": name, "parameters": args}),
            tool_names,
        )?);
    }
    Some(Parsed {
        content: python_strip(&text[..first]).to_owned(),
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_version_s_calls() {
        let names = vec!["f".to_owned()];
        let v3 = "Hi <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        let p = parse(ParserKind::DeepseekV3, v3, &names).unwrap_or_default();
        assert_eq!(
            (p.content.as_str(), p.calls[0].arguments.as_str()),
            ("Hi", "{\"a\": 1}")
        );
        let v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        let p = parse(ParserKind::DeepseekV31, v31, &names).unwrap_or_default();
        assert_eq!(p.calls[0].arguments, "{\"b\": 2}");
        assert!(parse(ParserKind::DeepseekV31, v3, &names).is_none());
    }
}
