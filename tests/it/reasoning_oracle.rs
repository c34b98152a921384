//! The reasoning parsers against SGLang's own (tests/python/reasoning_oracle.py runs
//! `sglang.srt.parser.reasoning_parser.ReasoningParser` over the same corpus in this run): for
//! every parser shipped and every text, the non-streamed split equals SGLang's
//! `parse_non_stream`, the start state equals the one SGLang's chat server picks for the
//! request's `chat_template_kwargs`, and the streamed split — under every two-piece cut, one
//! character at a time, and random chunkings — equals SGLang's streaming parser fed whole tags
//! (plus what it would still hold at the end, which SGLang drops).

use clap::ValueEnum;
use serde_json::{json, Value};
use switchboard::reasoning::{split_whole, ParserKind, Split, StreamSplitter};

use crate::support;
use crate::support::chunking::{chunkings, XorShift};

fn corpus() -> Vec<(&'static str, Value)> {
    let off = json!({"enable_thinking": false});
    let on = json!({"enable_thinking": true});
    vec![
        ("The answer is 42.", Value::Null),
        ("<think>Let me think.</think>The answer is 42.", Value::Null),
        (
            "<think>\nStep 1: 6*7.\n</think>\n\nThe answer is 42.\n",
            Value::Null,
        ),
        ("No opening tag, then it ends.</think>Answer.", Value::Null),
        ("<think>cut off while thinking", Value::Null),
        ("<think>cut off at a tag's start </thi", Value::Null),
        (
            "Text before <think>the reasoning</think> and after.",
            Value::Null,
        ),
        ("<think></think>Empty reasoning.", Value::Null),
        ("<think>Ünïcödé 🦙 思考</think>答案是42。", Value::Null),
        ("◁think▷考虑 🦙◁/think▷Answer ◁/think▷", Value::Null),
        ("<think>a</think>b<think>c</think>d", Value::Null),
        (
            "a < b and c > d, </ no tag <think>x < y</think>y > x",
            Value::Null,
        ),
        (
            "\u{1f}<think> spaced \u{1c}</think> \u{a0}tail\u{1f}",
            Value::Null,
        ),
        ("", Value::Null),
        ("The answer is 42.", off.clone()),
        ("<think>x</think>y", off),
        ("<think>x</think>y", on),
        ("plain", json!({"other": 1})),
        ("<think>x</think>y", json!({"thinking": true})),
        ("<think>x</think>y", json!({"thinking": false})),
        ("plain", json!({"thinking": true})),
        ("plain", json!({"thinking": false})),
        ("plain", json!({"thinking": 1})),
    ]
}

fn streamed(kind: ParserKind, kwargs: &Value, chunks: &[&str]) -> Split {
    let mut s = StreamSplitter::new(kind.format(kwargs.as_object()));
    let mut all = Split::default();
    let mut parts: Vec<Split> = chunks.iter().map(|c| s.push(c)).collect();
    parts.push(s.finish());
    for p in parts {
        all.reasoning.push_str(&p.reasoning);
        all.content.push_str(&p.content);
    }
    all
}

fn pair(v: &Value) -> (String, String) {
    let s = |i: usize| v[i].as_str().expect("string").to_owned();
    (s(0), s(1))
}

#[tokio::test]
async fn every_parser_splits_as_sglang_under_any_chunking() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let cases = corpus();
    let parsers: Vec<&str> = tag_parsers().map(|k| k.name()).collect();
    let input = json!({
        "parsers": parsers,
        "cases": cases.iter().map(|(t, k)| json!({"text": t, "kwargs": k})).collect::<Vec<_>>(),
    });
    let path =
        std::env::temp_dir().join(format!("sb-reasoning-corpus-{}.json", std::process::id()));
    std::fs::write(&path, input.to_string()).unwrap();
    let oracle = support::python::run(
        &py,
        "tests/python/reasoning_oracle.py",
        vec![path.display().to_string()],
    )
    .await;
    let _ = std::fs::remove_file(&path);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    for kind in tag_parsers() {
        let expected = oracle["results"][kind.name()].as_array().expect("results");
        assert_eq!(expected.len(), cases.len());
        for ((text, kwargs), want) in cases.iter().zip(expected) {
            let what = format!("{} {text:?} kwargs={kwargs}", kind.name());
            let format = kind.format(kwargs.as_object());
            assert_eq!(
                Value::Bool(format.starts_in_reasoning),
                want["starts_inside"],
                "{what}: start state"
            );
            let whole = split_whole(format, text);
            assert_eq!(
                (whole.reasoning, whole.content),
                pair(&want["whole"]),
                "{what}: not streamed"
            );
            let want_stream = pair(&want["stream"]);
            for chunks in chunkings(text, &mut rng) {
                let got = streamed(kind, kwargs, &chunks);
                assert_eq!(
                    (got.reasoning, got.content),
                    want_stream,
                    "{what}: streamed as {chunks:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "only {checked} chunkings checked");
}

/// The parsers that split on two tags (all but gpt-oss's Harmony channels).
fn tag_parsers() -> impl Iterator<Item = ParserKind> {
    ParserKind::value_variants()
        .iter()
        .copied()
        .filter(|k| *k != ParserKind::GptOss)
}

/// gpt-oss's Harmony output: reasoning, answers, calls (kept for the tool-call parser), text
/// between blocks, cut-off blocks, unknown channels and markers.
const HARMONY: [&str; 16] = [
    "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 42.<|return|>",
    "<|channel|>analysis<|message|>Ünïcödé 思考 🦙 \"q\" \\ <|end|><|start|>assistant<|channel|>final<|message|>答案是42。<|return|>",
    "<|channel|>analysis<|message|>cut off while thinking",
    "<|channel|>analysis<|message|>cut off at a marker <|en",
    "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c",
    "<|channel|>analysis<|message|>Need a tool.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>",
    "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary<|message|>Preamble.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|> trailing",
    "<|channel|>analysis<|message|>x<|end|>\n<|start|>assistant<|channel|>final<|message|>y<|return|>",
    "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>commentary<|start|>assistant<|channel|>final<|message|>after the call<|return|>",
    "<|channel|>final<|message|>no reasoning, a <|end|> inside<|return|>",
    "<|channel|>weird<|message|>unknown channel<|end|> rest",
    "text before <|channel|>analysis<|message|>r<|end|> text after <|weird|> more",
    "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"unfinished\": ",
    "<|start|>functions.f to=assistant<|channel|>commentary<|message|>{\"tool\": \"answer\"}<|end|>",
    "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>\n",
    "plain text without any channel",
];

#[tokio::test]
async fn gpt_oss_splits_harmony_as_sglang_under_any_chunking() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let cases: Vec<Value> = HARMONY
        .iter()
        .map(|t| json!({"text": t, "kwargs": null}))
        .collect();
    let input = json!({"parsers": ["gpt-oss"], "cases": cases});
    let path = std::env::temp_dir().join(format!("sb-harmony-corpus-{}.json", std::process::id()));
    std::fs::write(&path, input.to_string()).unwrap();
    let oracle = support::python::run(
        &py,
        "tests/python/reasoning_oracle.py",
        vec![path.display().to_string()],
    )
    .await;
    let _ = std::fs::remove_file(&path);
    let expected = oracle["results"]["gpt-oss"].as_array().expect("results");
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut checked = 0;
    for (text, want) in HARMONY.iter().zip(expected) {
        assert_eq!(
            want["starts_inside"], true,
            "gpt-oss always reads reasoning"
        );
        // SGLang's answer on the whole text is the answer, streamed too; text that is not
        // Harmony at all is content here (SGLang's parser loses it).
        let want = match switchboard::reasoning::harmony::is_harmony(text) {
            true => pair(&want["whole"]),
            false => (String::new(), text.to_string()),
        };
        let format = ParserKind::GptOss.format(None);
        let whole = split_whole(format, text);
        assert_eq!((whole.reasoning, whole.content), want, "{text:?}");
        for chunks in chunkings(text, &mut rng) {
            let got = streamed(ParserKind::GptOss, &Value::Null, &chunks);
            assert_eq!(
                (got.reasoning, got.content),
                want,
                "{text:?} streamed as {chunks:?}"
            );
            checked += 1;
        }
    }
    assert!(checked > 500, "only {checked} chunkings checked");
}
