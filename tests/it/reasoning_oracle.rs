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
    let parsers: Vec<&str> = ParserKind::value_variants()
        .iter()
        .map(|k| k.name())
        .collect();
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
    for kind in ParserKind::value_variants() {
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
                let got = streamed(*kind, kwargs, &chunks);
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
