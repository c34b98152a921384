//! The tool-call parsers against SGLang's own (tests/python/tool_call_oracle.py runs
//! `sglang.srt.function_call.function_call_parser.FunctionCallParser` over the same corpus, as
//! SGLang's chat server uses it): for every parser shipped and every text, the non-streamed
//! answer — content, each call's name and its arguments string — equals SGLang's exactly, and
//! the streamed one, joined, under every two-piece cut, one character at a time and random
//! chunkings, gives the same content and calls (arguments compared as JSON).
//!
//! Not in the corpus: text with leading whitespace *before other text* and then a call — SGLang
//! strips it from the content, a stream has already sent it.

use clap::ValueEnum;
use serde_json::{json, Value};
use switchboard::tool_calls::{parse_whole, Parsed, ParserKind, Reading, StreamParser};

use crate::support;
use crate::support::chunking::{chunkings, XorShift};

const TOOLS: [&str; 2] = ["get_weather", "search"];

fn corpus() -> Vec<&'static str> {
    vec![
        "The weather is fine today.",
        "",
        "  spaced plain text \n",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"days\":3}}\n</tool_call>\n<tool_call>\n{\"name\":\"search\",\"arguments\":{\"q\":\"rust\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"filter\": {\"tags\": [\"a\", {\"b\": [1, 2.5, null, true]}], \"n\": -0.0, \"big\": 1e21, \"small\": 1.5e-7}}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"caf\\u00e9 🦙 \\\"quoted\\\" back\\\\slash\\n\\t\\u0001 \\/ 思考\"}}\n</tool_call>",
        "Let me look that up for you.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\nDone, and some text after.",
        "Before <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call> between <tool_call>\n{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}\n</tool_call> after",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\n</tool_call>",
        "<tool_call>\nnot json at all\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"ok\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"unknown_fn\", \"arguments\": {\"a\": 1}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>",
        "<tool_call>\n[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}, {\"name\": \"search\", \"arguments\": {\"q\": \"B\"}}]\n</tool_call>",
        "<tool_call>\n\"just a string\"\n</tool_call>",
        "cut off in a call <tool_call>\n{\"name\": \"get_weather\", \"argu",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
        "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"open\"}}",
        "a <tool_call></tool_call> b",
        "text with a < sign and <tool_ but no call </tool_call>",
        "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}, \"parameters\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"search\", \"arguments\": \"already a string\"}\n</tool_call>",
    ]
}

fn reading(kind: ParserKind) -> Reading {
    Reading {
        kind,
        tool_names: TOOLS.iter().map(|s| s.to_string()).collect(),
    }
}

fn streamed(kind: ParserKind, chunks: &[&str]) -> Parsed {
    let mut p = StreamParser::new(reading(kind));
    let mut content: String = chunks.iter().map(|c| p.push(c)).collect();
    let end = p.finish();
    content.push_str(&end.content);
    Parsed {
        content,
        calls: end.calls,
    }
}

/// SGLang's answer as (content, [(name, arguments)]), content `""` for its `null`.
fn expected(v: &Value) -> (String, Vec<(String, String)>) {
    let content = v["content"].as_str().unwrap_or_default().to_owned();
    let calls = v["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| {
            let s = |i: usize| c[i].as_str().expect("string").to_owned();
            (s(0), s(1))
        })
        .collect();
    (content, calls)
}

fn as_json(calls: &[(String, String)]) -> Vec<(String, Value)> {
    calls
        .iter()
        .map(|(n, a)| {
            (
                n.clone(),
                serde_json::from_str(a).expect("arguments are JSON"),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_parser_reads_calls_as_sglang_under_any_chunking() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let cases = corpus();
    let parsers: Vec<&str> = ParserKind::value_variants()
        .iter()
        .map(|k| k.name())
        .collect();
    let input = json!({"parsers": parsers, "tools": TOOLS, "cases": cases});
    let path = std::env::temp_dir().join(format!("sb-toolcall-corpus-{}.json", std::process::id()));
    std::fs::write(&path, input.to_string()).unwrap();
    let oracle = support::python::run(
        &py,
        "tests/python/tool_call_oracle.py",
        vec![path.display().to_string()],
    )
    .await;
    let _ = std::fs::remove_file(&path);
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let (mut checked, mut with_calls) = (0, 0);
    for kind in ParserKind::value_variants() {
        let expected_all = oracle["results"][kind.name()].as_array().expect("results");
        assert_eq!(expected_all.len(), cases.len());
        for (text, want) in cases.iter().zip(expected_all) {
            let what = format!("{} {text:?}", kind.name());
            let want = expected(want);
            let whole = parse_whole(&reading(*kind), text);
            let got: Vec<(String, String)> = whole
                .calls
                .iter()
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect();
            assert_eq!((whole.content, got), want, "{what}: not streamed");
            with_calls += usize::from(!want.1.is_empty());
            for chunks in chunkings(text, &mut rng) {
                let s = streamed(*kind, &chunks);
                let calls: Vec<(String, String)> = s
                    .calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect();
                assert_eq!(s.content, want.0, "{what}: streamed as {chunks:?}");
                assert_eq!(
                    as_json(&calls),
                    as_json(&want.1),
                    "{what}: streamed as {chunks:?}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "only {checked} chunkings checked");
    assert!(with_calls > 10, "only {with_calls} answers with calls");
}
