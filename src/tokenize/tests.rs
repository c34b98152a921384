//! Tests against the real tokenizers in `assets/tokenizers/` and their
//! golden prompts/ids (made with transformers' `apply_chat_template`).

use super::*;
use serde_json::{json, Value as Json};
use std::sync::OnceLock;

pub(crate) const QWEN25: &str = "qwen2.5-0.5b-instruct";
pub(crate) const QWEN3: &str = "qwen3";
pub(crate) const MISTRAL: &str = "mistral-7b-instruct-v0.1";
pub(crate) const SMOLLM2: &str = "smollm2-135m-instruct";
pub(crate) const ALL: [&str; 4] = [QWEN25, QWEN3, MISTRAL, SMOLLM2];

pub(crate) fn asset_dir(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/tokenizers/")).join(name)
}

/// Loading a 150k-vocab tokenizer is slow in debug builds: load each once.
pub(crate) fn load(name: &str) -> &'static Tokenizer {
    static CACHE: [OnceLock<Tokenizer>; 4] = [const { OnceLock::new() }; 4];
    let i = ALL
        .iter()
        .position(|n| *n == name)
        .expect("known tokenizer");
    CACHE[i].get_or_init(|| Tokenizer::from_dir(&asset_dir(name)).expect("load tokenizer"))
}

fn golden(name: &str) -> Json {
    let bytes = std::fs::read(asset_dir(name).join("golden.json")).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn tokenizer_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Tokenizer>();
    fn assert_send<T: Send>() {}
    assert_send::<IncrementalDecoder>();
}

#[test]
fn golden_chat_prompts_and_ids() {
    for name in ALL {
        let tok = load(name);
        let g = golden(name);
        let cases = g["chat"].as_array().unwrap();
        assert!(!cases.is_empty());
        for (i, case) in cases.iter().enumerate() {
            let messages = case["messages"].as_array().unwrap();
            let tools: Option<Vec<crate::protocol::openai::Tool>> = case
                .get("tools")
                .map(|t| serde_json::from_value(t.clone()).unwrap());
            let input = ChatTemplateInput {
                messages,
                tools: tools.as_deref(),
                add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
                extra: None,
            };
            let prompt = tok.apply_chat_template(&input).unwrap();
            assert_eq!(prompt, case["prompt"].as_str().unwrap(), "{name} chat #{i}");
            // Every bundled template has joining blocks (`chat_template::concat`): their split
            // form alone gives the same prompt, so long messages take a fast path that is right.
            let split = tok.apply_split_chat_template(&input);
            assert_eq!(
                split.map_err(|e| e.to_string()).as_deref(),
                Ok(prompt.as_str()),
                "{name} chat #{i}, split"
            );
            let want: Vec<u32> = serde_json::from_value(case["input_ids"].clone()).unwrap();
            assert_eq!(
                tok.encode(&prompt, false).unwrap(),
                want,
                "{name} chat #{i} ids"
            );
            assert_eq!(
                tok.render_and_encode(&input).unwrap(),
                want,
                "{name} chat #{i}"
            );
        }
    }
}

#[test]
fn golden_encode_ids() {
    for name in ALL {
        let tok = load(name);
        let g = golden(name);
        for (i, case) in g["encode"].as_array().unwrap().iter().enumerate() {
            let text = case["text"].as_str().unwrap();
            let add = case["add_special_tokens"].as_bool().unwrap();
            let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
            assert_eq!(
                tok.encode(text, add).unwrap(),
                want,
                "{name} encode #{i} {text:?}"
            );
        }
    }
}

#[test]
fn metadata() {
    let q = load(QWEN25);
    assert_eq!(q.vocab_size(), 151_665);
    assert_eq!(q.eos_token_ids(), &[151_645]);
    assert_eq!(q.bos_token(), None);
    assert_eq!(q.model_max_length(), Some(131_072));
    assert_eq!(q.token_to_id("<|im_end|>"), Some(151_645));
    assert_eq!(q.id_to_token(151_645).as_deref(), Some("<|im_end|>"));
    assert!(q.is_special(151_643) && q.is_special(151_645) && !q.is_special(9707));
    assert_eq!(q.content_format(), Some(ContentFormat::String));
    assert_eq!(load(QWEN3).vocab_size(), 151_669);

    let m = load(MISTRAL);
    assert_eq!(m.vocab_size(), 32_000);
    assert_eq!(m.bos_token(), Some("<s>"));
    assert_eq!(m.eos_token_ids(), &[2]);
    assert_eq!(m.model_max_length(), None, "1e30 placeholder");
    assert_eq!(m.content_format(), Some(ContentFormat::OpenAi));

    let s = load(SMOLLM2);
    assert_eq!(s.vocab_size(), 49_152);
    assert_eq!(s.model_max_length(), Some(8192));
    assert_eq!(s.eos_token_ids(), &[2]);
}

#[test]
fn from_bytes_generation_config_and_template_override() {
    let dir = asset_dir(SMOLLM2);
    let tj = std::fs::read(dir.join("tokenizer.json")).unwrap();
    let cj = std::fs::read(dir.join("tokenizer_config.json")).unwrap();
    let tok = Tokenizer::from_bytes(&tj, &cj).unwrap();
    assert_eq!(
        tok.encode("Hello world", false).unwrap(),
        load(SMOLLM2).encode("Hello world", false).unwrap()
    );

    // A directory with generation_config.json and chat_template.jinja.
    let tmp = std::env::temp_dir().join(format!("tok-test-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("tokenizer.json"), &tj).unwrap();
    std::fs::write(tmp.join("tokenizer_config.json"), &cj).unwrap();
    std::fs::write(
        tmp.join("generation_config.json"),
        br#"{"eos_token_id": [0, 2]}"#,
    )
    .unwrap();
    std::fs::write(
        tmp.join("chat_template.jinja"),
        "{% for m in messages %}[{{ m.content }}]{% endfor %}",
    )
    .unwrap();
    let tok = Tokenizer::from_dir(&tmp).unwrap();
    std::fs::remove_dir_all(&tmp).unwrap();
    assert_eq!(tok.eos_token_ids(), &[2, 0]);
    let msgs = [json!({"role": "user", "content": "hi"})];
    assert_eq!(
        tok.apply_chat_template(&ChatTemplateInput::new(&msgs))
            .unwrap(),
        "[hi]"
    );

    let tok = tok
        .with_chat_template("{{ bos_token }}{{ messages[0].content }}".into())
        .unwrap();
    assert_eq!(
        tok.apply_chat_template(&ChatTemplateInput::new(&msgs))
            .unwrap(),
        "<|im_start|>hi"
    );
    assert!(matches!(
        tok.with_chat_template("{% if %}".into()),
        Err(TokenizeError::Template(_))
    ));

    let err = Tokenizer::from_dir(Path::new("/nonexistent/dir")).unwrap_err();
    assert!(matches!(err, TokenizeError::Load(..)), "{err}");
}

#[test]
fn mistral_template_raises_on_bad_roles() {
    let tok = load(MISTRAL);
    let cases = [
        (
            vec![
                json!({"role": "assistant", "content": "Hi"}),
                json!({"role": "user", "content": "x"}),
            ],
            "Conversation must start with a user message, got assistant.",
        ),
        (
            vec![
                json!({"role": "user", "content": "x"}),
                json!({"role": "tool", "content": "{}"}),
            ],
            "Unexpected role 'tool' after role 'user'",
        ),
    ];
    for (msgs, want) in cases {
        match tok.apply_chat_template(&ChatTemplateInput::new(&msgs)) {
            Err(e @ TokenizeError::TemplateRaised(_)) => {
                assert!(e.is_client_error());
                assert_eq!(e.to_string(), want);
            }
            other => panic!("expected TemplateRaised, got {other:?}"),
        }
    }
    // This template merges consecutive same-role messages instead of raising.
    let msgs = [
        json!({"role": "user", "content": "a"}),
        json!({"role": "user", "content": "b"}),
    ];
    let p = tok
        .apply_chat_template(&ChatTemplateInput::new(&msgs))
        .unwrap();
    assert_eq!(p, "<s> [INST] a\n\nb [/INST]");
}

#[test]
fn content_parts_are_normalised_per_template() {
    let parts = [json!({"role": "user", "content": [
        {"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]})];
    let plain = [json!({"role": "user", "content": "Hello world"})];
    // String-format template: parts joined with one space, as SGLang does.
    let q = load(QWEN25);
    assert_eq!(
        q.apply_chat_template(&ChatTemplateInput::new(&parts))
            .unwrap(),
        q.apply_chat_template(&ChatTemplateInput::new(&plain))
            .unwrap()
    );
    // Mistral's template loops over parts itself (and joins them with "\n\n").
    let m = load(MISTRAL);
    assert_eq!(
        m.apply_chat_template(&ChatTemplateInput::new(&parts))
            .unwrap(),
        "<s> [INST] Hello\n\nworld [/INST]"
    );
    let image = [json!({"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]})];
    for name in ALL {
        let err = load(name)
            .apply_chat_template(&ChatTemplateInput::new(&image))
            .unwrap_err();
        assert!(
            matches!(err, TokenizeError::UnsupportedContent(_)),
            "{name}: {err:?}"
        );
        assert!(err.is_client_error());
    }
}

#[test]
fn null_fields_are_dropped_like_sglang() {
    // `content: null` next to tool_calls must read as undefined/falsy.
    let q = load(QWEN25);
    let msgs = [
        json!({"role": "user", "content": "Weather?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "w", "arguments": {"c": "P"}}}]}),
    ];
    let p = q
        .apply_chat_template(&ChatTemplateInput {
            add_generation_prompt: false,
            ..ChatTemplateInput::new(&msgs)
        })
        .unwrap();
    assert!(p.ends_with("<|im_start|>assistant\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n</tool_call><|im_end|>\n"), "{p:?}");
}

#[test]
fn chat_template_kwargs_reach_the_template() {
    let tok = load(QWEN3);
    let msgs = [json!({"role": "user", "content": "Hi"})];
    let extra = json!({"enable_thinking": false});
    let input = ChatTemplateInput {
        extra: extra.as_object(),
        ..ChatTemplateInput::new(&msgs)
    };
    let p = tok.apply_chat_template(&input).unwrap();
    assert!(
        p.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
        "{p:?}"
    );
    // The fixed arguments win over kwargs of the same name.
    let extra = json!({"add_generation_prompt": false, "messages": []});
    let input = ChatTemplateInput {
        extra: extra.as_object(),
        ..ChatTemplateInput::new(&msgs)
    };
    assert!(tok
        .apply_chat_template(&input)
        .unwrap()
        .ends_with("<|im_start|>assistant\n"));
}

#[test]
fn tools_with_html_characters_render_like_python() {
    let tok = load(QWEN25);
    let tools: Vec<crate::protocol::openai::Tool> = serde_json::from_value(json!([{"type": "function", "function": {"name": "q", "description": "a < b & 'c'",
        "parameters": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "number"}}}}}])).unwrap();
    let msgs = [json!({"role": "user", "content": "x"})];
    let input = ChatTemplateInput {
        tools: Some(&tools),
        ..ChatTemplateInput::new(&msgs)
    };
    let p = tok.apply_chat_template(&input).unwrap();
    assert!(p.contains(r#"{"type": "function", "function": {"name": "q", "description": "a < b & 'c'", "parameters": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "number"}}}}}"#), "{p}");
}

#[test]
fn segment_cache_is_used_where_it_keeps_ids_identical() {
    for dir in [SMOLLM2, QWEN25, QWEN3] {
        let tok = load(dir);
        assert_eq!(
            tok.piece_cuts(),
            "words and digits",
            "{dir} splits numbers into digits"
        );
        // A long prompt that shares a prefix with another: chunked, cached, and still exact.
        let mut text = String::new();
        for i in 0..600 {
            text.push_str(
                [
                    "The quick",
                    " brown fox's",
                    " 1234",
                    " naïve\n",
                    " 2024-11-21 3.14159 x1234",
                    "  jumps",
                    " ☃ over",
                    " <|im_start|>",
                ][i % 8],
            );
        }
        let plain = tok
            .inner
            .hf
            .encode_fast(text.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        assert_eq!(
            tok.encode(&text, false).unwrap(),
            plain,
            "{dir}: first encode"
        );
        assert_eq!(
            tok.encode(&text, false).unwrap(),
            plain,
            "{dir}: from the cache"
        );
        let longer = format!("{text} and one more question?");
        let plain = tok
            .inner
            .hf
            .encode_fast(longer.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        assert_eq!(
            tok.encode(&longer, false).unwrap(),
            plain,
            "{dir}: shared prefix"
        );
    }
}

#[test]
fn sentencepiece_prompts_are_not_cut() {
    // Its "prepend ▁ to the first piece" depends on where a piece is in the whole text.
    assert_eq!(load(MISTRAL).piece_cuts(), "off");
}

#[test]
fn digits_are_cut_apart_only_where_the_tokenizer_splits_them() {
    // SmolLM2 with digits kept together and tokens for "12" and "123": the piece cache stays
    // on, the cuts between digits do not, and numbers still encode exactly.
    let dir = asset_dir(SMOLLM2);
    let mut json: Json =
        serde_json::from_slice(&std::fs::read(dir.join("tokenizer.json")).unwrap()).unwrap();
    json["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = json!(false);
    json["model"]["vocab"]["12"] = json!(49152);
    json["model"]["vocab"]["123"] = json!(49153);
    let merges = json["model"]["merges"].as_array_mut().unwrap();
    merges.splice(0..0, [json!("1 2"), json!("12 3")]);
    let config = std::fs::read(dir.join("tokenizer_config.json")).unwrap();
    let tok = Tokenizer::from_bytes(&serde_json::to_vec(&json).unwrap(), &config).unwrap();
    assert_eq!(tok.piece_cuts(), "words");
    let text = "call 5551234 on 2024-11-21, pay 1234567.89 or 42";
    let plain = tok.inner.hf.encode_fast(text, false).unwrap();
    assert_eq!(tok.encode(text, false).unwrap(), plain.get_ids());
    assert!(plain.get_ids().contains(&49153), "\"123\" is one token");
}
