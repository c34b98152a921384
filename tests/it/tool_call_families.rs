//! Every other family's calls through the gateway in front of a sim with Qwen2.5's tokenizer
//! made to say them (`POST /sim/script`; parser choice does not depend on the template, so
//! Qwen's tokenizer can say any family's markers, cut into many tokens): the same content and
//! calls, whole, streamed and through the OpenAI SDK; gpt-oss with its reasoning parser too.

use serde_json::json;

use crate::support;
use crate::tool_calls_gateway::{chat, qwen_sim, sdk_reads, MODEL};

/// Each other family's call syntax, said by the sim (parser choice does not depend on the
/// template, so Qwen's tokenizer can say it), read through the gateway started with its parser:
/// the same content and calls, whole, streamed and through the OpenAI SDK.
#[tokio::test]
async fn every_family_s_calls_are_read_through_the_gateway() {
    const DS: (&str, &str, &str, &str) = (
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
    );
    let (paris, zurich) = (
        r#"{"city": "Paris", "unit": "°C"}"#,
        r#"{"city": "Zürich", "days": [1, 2]}"#,
    );
    let (b, cb, sep, ce) = DS;
    let answers = [
        (
            "llama3",
            format!(
                r#"Let me check both.<|python_tag|>{{"name": "get_weather", "parameters": {paris}}};{{"name": "get_weather", "parameters": {zurich}}}"#
            ),
        ),
        (
            "mistral",
            format!(
                r#"Let me check both. [TOOL_CALLS] [{{"name": "get_weather", "arguments": {paris}}}, {{"name": "get_weather", "arguments": {zurich}}}]"#
            ),
        ),
        (
            "pythonic",
            r#"Let me check both.[get_weather(city="Paris", unit="°C"), get_weather(city='Zürich', days=[1, 2])]"#.to_owned(),
        ),
        (
            "deepseekv3",
            format!(
                "Let me check both.\n{b}{cb}function{sep}get_weather\n```json\n{paris}\n```{ce}\n{cb}function{sep}get_weather\n```json\n{zurich}\n```{ce}<｜tool▁calls▁end｜>"
            ),
        ),
        (
            "deepseekv31",
            format!(
                "Let me check both.\n{b}{cb}get_weather{sep}{paris}{ce}{cb}get_weather{sep}{zurich}{ce}<｜tool▁calls▁end｜>"
            ),
        ),
        (
            "kimi_k2",
            format!(
                "Let me check both.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{paris}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{zurich}<|tool_call_end|><|tool_calls_section_end|>"
            ),
        ),
        (
            "qwen3_coder",
            "Let me check both.<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\n°C\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nZürich\n</parameter>\n<parameter=days>\n[1, 2]\n</parameter>\n</function>\n</tool_call>".to_owned(),
        ),
        (
            "gpt-oss",
            format!(
                "Let me check both.<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{paris}<|call|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{zurich}<|call|>"
            ),
        ),
        (
            "glm45",
            "Let me check both.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>°C</arg_value>\n</tool_call><tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Zürich</arg_value>\n<arg_key>days</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>".to_owned(),
        ),
    ];
    let want = vec![
        (
            "get_weather".to_owned(),
            serde_json::from_str(paris).unwrap(),
        ),
        (
            "get_weather".to_owned(),
            serde_json::from_str(zurich).unwrap(),
        ),
    ];
    let sim = qwen_sim().await;
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    for (parser, answer) in &answers {
        let prompt = format!("weather via {parser}?");
        let rule = json!({"match": prompt, "output": answer});
        let r = support::post(format!("{}/sim/script", sim.url), &rule).await;
        assert_eq!(r.status().as_u16(), 200);
        let gw = support::gateway(
            &[&sim],
            &["--model-path", &dir, "--tool-call-parser", parser],
        )
        .await;
        // DeepSeek's markers are many tokens in Qwen's vocabulary.
        let messages =
            json!({"max_tokens": 512, "messages": [{"role": "user", "content": prompt}]});
        for stream in [false, true] {
            let a = chat(&gw.url, stream, messages.clone()).await;
            let what = format!("{parser} stream={stream}");
            assert_eq!(a.content.as_deref(), Some("Let me check both."), "{what}");
            assert_eq!(a.calls, want, "{what}");
            assert_eq!(a.finish, "tool_calls", "{what}");
        }
        sdk_reads(&gw.url, &prompt, "Let me check both.", &want).await;
    }
}

/// gpt-oss with both of its parsers, as its SGLang server runs: the analysis channel is the
/// reasoning, the commentary calls are `tool_calls`, the final channel the content; whole and
/// streamed (Harmony's markers are many tokens in Qwen's vocabulary, so they arrive cut).
#[tokio::test]
async fn gpt_oss_reasoning_and_calls_through_the_gateway() {
    let sim = qwen_sim().await;
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    let call = |args: &str| {
        format!("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{args}<|call|>")
    };
    let calls = format!(
        "<|channel|>analysis<|message|>Two cities: two calls 🦙.<|end|>{}{}",
        call(r#"{"city": "Paris"}"#),
        call(r#"{"city": "Zürich", "days": [1, 2]}"#)
    );
    let answer = "<|channel|>analysis<|message|>Nothing to call.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny, 20 °C.<|return|>";
    for (m, out) in [
        ("harmony calls", calls.as_str()),
        ("harmony answer", answer),
    ] {
        let rule = json!({"match": m, "output": out});
        support::post(format!("{}/sim/script", sim.url), &rule).await;
    }
    let gw = support::gateway(
        &[&sim],
        &[
            "--model-path",
            &dir,
            "--tool-call-parser",
            "gpt-oss",
            "--reasoning-parser",
            "gpt-oss",
        ],
    )
    .await;
    let want = vec![
        ("get_weather".to_owned(), json!({"city": "Paris"})),
        (
            "get_weather".to_owned(),
            json!({"city": "Zürich", "days": [1, 2]}),
        ),
    ];
    for stream in [false, true] {
        let ask =
            |q: &str| json!({"max_tokens": 512, "messages": [{"role": "user", "content": q}]});
        let a = chat(&gw.url, stream, ask("harmony calls")).await;
        assert_eq!(
            (a.reasoning.as_deref(), a.content.as_deref()),
            (Some("Two cities: two calls 🦙."), None),
            "stream={stream}"
        );
        assert_eq!((a.calls, a.finish.as_str()), (want.clone(), "tool_calls"));
        let a = chat(&gw.url, stream, ask("harmony answer")).await;
        assert_eq!(
            (a.reasoning.as_deref(), a.content.as_deref()),
            (Some("Nothing to call."), Some("It is sunny, 20 °C.")),
            "stream={stream}"
        );
        assert_eq!((a.calls.len(), a.finish.as_str()), (0, "stop"));
    }
    sdk_reads(&gw.url, "harmony calls", "", &want).await;
}
