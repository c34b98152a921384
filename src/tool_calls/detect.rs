//! The parser a model calls for when `--tool-call-parser` is not given: the call syntax its
//! chat template teaches it, else its name (the model family, as SMG picks a parser from the
//! model id). Nothing found: no parser, and requests with `tools` go to the worker's route.

use super::ParserKind;

/// What a template that renders tools writes around a call, first match wins.
const TEMPLATE_MARKERS: [(&str, ParserKind); 10] = [
    ("<|channel|>", ParserKind::GptOss),
    // GLM-4.5's template has `<tool_call>` too, around `<arg_key>`.
    ("<arg_key>", ParserKind::Glm45),
    // Qwen3-Coder's template has `<tool_call>` too, around `<function=…>`.
    ("<function=", ParserKind::Qwen3Coder),
    ("<|tool_calls_section_begin|>", ParserKind::KimiK2),
    // DeepSeek V3 names the call `function<｜tool▁sep｜>name`; V3.1 puts the name first.
    ("function<｜tool▁sep｜>", ParserKind::DeepseekV3),
    ("<｜tool▁calls▁begin｜>", ParserKind::DeepseekV31),
    ("[TOOL_CALLS]", ParserKind::Mistral),
    ("<|python_start|>", ParserKind::Pythonic),
    ("<|python_tag|>", ParserKind::Llama3),
    ("<tool_call>", ParserKind::Qwen25),
];

/// Parts of a model's name (lower case) and their family's parser, first match wins.
const NAME_PARTS: [(&str, ParserKind); 16] = [
    ("gpt-oss", ParserKind::GptOss),
    ("glm-4.5", ParserKind::Glm45),
    ("glm-4.6", ParserKind::Glm45),
    ("kimi-k2", ParserKind::KimiK2),
    ("deepseek-v3.1", ParserKind::DeepseekV31),
    ("deepseek-v3.2", ParserKind::DeepseekV31),
    ("deepseek-v3", ParserKind::DeepseekV3),
    ("mistral", ParserKind::Mistral),
    ("mixtral", ParserKind::Mistral),
    ("llama-4", ParserKind::Pythonic),
    ("llama4", ParserKind::Pythonic),
    ("llama-3", ParserKind::Llama3),
    ("llama3", ParserKind::Llama3),
    ("qwen3-coder", ParserKind::Qwen3Coder),
    ("qwen", ParserKind::Qwen25),
    ("qwq", ParserKind::Qwen25),
];

/// The parser for a model with this chat template (the one that renders `tools`) and these
/// names (the served name, the tokenizer's folder or Hub id).
pub fn detect(template: Option<&str>, names: &[&str]) -> Option<ParserKind> {
    if let Some(t) = template {
        if let Some((_, kind)) = TEMPLATE_MARKERS.iter().find(|(m, _)| t.contains(m)) {
            return Some(*kind);
        }
    }
    names.iter().find_map(|name| {
        let name = name.to_lowercase();
        NAME_PARTS
            .iter()
            .find(|(part, _)| name.contains(part))
            .map(|(_, kind)| *kind)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(folder: &str) -> Option<String> {
        let path = format!("assets/tokenizers/{folder}/tokenizer_config.json");
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        config["chat_template"].as_str().map(str::to_owned)
    }

    #[test]
    fn the_shipped_tokenizers_get_their_family_s_parser() {
        for (folder, want) in [
            ("qwen2.5-0.5b-instruct", Some(ParserKind::Qwen25)),
            ("qwen3", Some(ParserKind::Qwen25)),
            // Its template renders no tools: the name says Mistral.
            ("mistral-7b-instruct-v0.1", Some(ParserKind::Mistral)),
            ("smollm2-135m-instruct", None),
        ] {
            let template = shipped(folder);
            assert!(template.is_some(), "{folder} has a template");
            assert_eq!(detect(template.as_deref(), &[folder]), want, "{folder}");
        }
    }

    #[test]
    fn the_template_wins_over_the_name() {
        let llama = "{{ '<|python_tag|>' }}";
        assert_eq!(detect(Some(llama), &["my-qwen"]), Some(ParserKind::Llama3));
        let v3 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>";
        assert_eq!(detect(Some(v3), &[]), Some(ParserKind::DeepseekV3));
        assert_eq!(
            detect(Some("<｜tool▁calls▁begin｜>"), &[]),
            Some(ParserKind::DeepseekV31)
        );
        let coder = "<tool_call>\n<function=name>";
        assert_eq!(detect(Some(coder), &[]), Some(ParserKind::Qwen3Coder));
        assert_eq!(
            detect(None, &["Qwen/Qwen3-Coder-30B"]),
            Some(ParserKind::Qwen3Coder)
        );
        let glm = "<tool_call>{{ tc.name }}\n<arg_key>";
        assert_eq!(detect(Some(glm), &[]), Some(ParserKind::Glm45));
        assert_eq!(detect(None, &["zai-org/GLM-4.6"]), Some(ParserKind::Glm45));
        let harmony = "<|start|>assistant<|channel|>commentary to=functions.";
        assert_eq!(detect(Some(harmony), &[]), Some(ParserKind::GptOss));
        assert_eq!(
            detect(None, &["openai/gpt-oss-20b"]),
            Some(ParserKind::GptOss)
        );
        assert_eq!(
            detect(None, &["meta-llama/Llama-4-Scout"]),
            Some(ParserKind::Pythonic)
        );
    }
}
