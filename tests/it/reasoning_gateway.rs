//! `--reasoning-parser` through the gateway in front of a sim made to think (`POST
//! /sim/script`): the sim's tokenizer cuts `<think>` into several tokens, so the tags arrive
//! split across stream chunks. Streamed and whole chat answers carry `reasoning_content` apart
//! from `content`, `separate_reasoning` is handled here (the sim's own route would not split),
//! and the official OpenAI SDK reads both.

use serde_json::{json, Value};

use crate::support::{self, MODEL};

const THINKING: &str = "<think>\nSix times seven: 6*7 = 42 🦙.\n</think>\n\nThe answer is 42.";

/// (reasoning, content) of one chat answer; a stream's deltas joined (each chunk carries one
/// of them, never both), `None` where the answer has no such field at all.
async fn chat(
    url: &str,
    prompt: &str,
    stream: bool,
    extra: Value,
) -> (Option<String>, Option<String>) {
    let mut body = json!({"model": MODEL, "stream": stream, "max_tokens": 64,
                          "messages": [{"role": "user", "content": prompt}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let r = support::post(format!("{url}/v1/chat/completions"), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    let field = |v: &Value, k: &str| v[k].as_str().map(str::to_owned);
    if !stream {
        let v: Value = serde_json::from_str(&text).unwrap();
        let m = &v["choices"][0]["message"];
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        return (field(m, "reasoning_content"), field(m, "content"));
    }
    let data = support::sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{text}");
    let (mut reasoning, mut content) = (None::<String>, None::<String>);
    for d in data.iter().filter(|d| *d != "[DONE]") {
        let v: Value = serde_json::from_str(d).unwrap();
        let delta = &v["choices"][0]["delta"];
        let (r, c) = (field(delta, "reasoning_content"), field(delta, "content"));
        assert!(r.is_none() || c.is_none(), "one field per chunk: {d}");
        if let Some(r) = r {
            reasoning.get_or_insert_with(String::new).push_str(&r);
        }
        // The role chunk's empty content is not part of the answer.
        if let Some(c) = c.filter(|c| !c.is_empty()) {
            content.get_or_insert_with(String::new).push_str(&c);
        }
    }
    (reasoning, content)
}

fn some(a: &str, b: &str) -> (Option<String>, Option<String>) {
    (Some(a.to_owned()), Some(b.to_owned()))
}

#[tokio::test]
async fn chat_answers_carry_the_reasoning_apart() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &["--reasoning-parser", "qwen3"]).await;
    for (m, out) in [
        ("six times seven", THINKING),
        ("keep thinking", "<think>hmm, 42? </thi"),
        ("no thinking", "Just 42."),
    ] {
        let rule = json!({"match": m, "output": out});
        let r = support::post(format!("{}/sim/script", sim.url), &rule).await;
        assert_eq!(r.status().as_u16(), 200);
    }
    let q = "what is six times seven?";
    // SGLang's split: whole answers are stripped; streams keep the text around the tags as is.
    let whole = some("Six times seven: 6*7 = 42 🦙.\n", "The answer is 42.");
    let streamed = some("\nSix times seven: 6*7 = 42 🦙.\n", "\n\nThe answer is 42.");
    for extra in [json!({}), json!({"separate_reasoning": true})] {
        assert_eq!(
            chat(&gw.url, q, false, extra.clone()).await,
            whole,
            "{extra}"
        );
        assert_eq!(
            chat(&gw.url, q, true, extra.clone()).await,
            streamed,
            "{extra}"
        );
    }
    // Off for one request: the raw text is the content.
    let raw = (None, Some(THINKING.to_owned()));
    for stream in [false, true] {
        let off = json!({"separate_reasoning": false});
        assert_eq!(chat(&gw.url, q, stream, off).await, raw, "stream={stream}");
    }
    // Cut off while thinking, ending in what could have been `</think>`: all reasoning, and the
    // held tail reaches the stream's client too.
    let cut = "please keep thinking";
    assert_eq!(
        chat(&gw.url, cut, false, json!({})).await,
        (Some("hmm, 42? </thi".into()), None)
    );
    assert_eq!(
        chat(&gw.url, cut, true, json!({})).await,
        (Some("hmm, 42? </thi".into()), None)
    );
    // `enable_thinking: false`: qwen3 no longer reads the answer as reasoning.
    let no = json!({"chat_template_kwargs": {"enable_thinking": false}});
    for stream in [false, true] {
        let got = chat(&gw.url, "no thinking please", stream, no.clone()).await;
        assert_eq!(got, (None, Some("Just 42.".into())), "stream={stream}");
    }
    // The same thinking answer without `enable_thinking` is read as reasoning (no end tag).
    assert_eq!(
        chat(&gw.url, "no thinking please", false, json!({})).await,
        (Some("Just 42.".into()), None)
    );

    let Some(py) = support::python::interpreter() else {
        return;
    };
    let r = support::python::run(
        &py,
        "tests/python/openai_sdk_reasoning.py",
        vec![gw.url.clone(), MODEL.into(), q.into()],
    )
    .await;
    assert_eq!(r["whole"], json!([whole.0, whole.1]), "{r}");
    assert_eq!(r["stream"], json!([streamed.0, streamed.1]), "{r}");
}

#[tokio::test]
async fn without_a_parser_the_text_is_all_content() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let rule = json!({"match": "six times seven", "output": THINKING});
    support::post(format!("{}/sim/script", sim.url), &rule).await;
    for stream in [false, true] {
        let got = chat(&gw.url, "six times seven?", stream, json!({})).await;
        assert_eq!(got, (None, Some(THINKING.to_owned())), "stream={stream}");
    }
}

/// The reasoning on the other front doors: Anthropic `thinking` blocks (`thinking_delta`s in a
/// stream), Responses `reasoning` items (`response.reasoning_text.delta`s); and Anthropic's
/// `thinking: disabled` turns the template's (and the parser's) `enable_thinking` off.
#[tokio::test]
async fn messages_and_responses_carry_the_reasoning_apart() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &["--reasoning-parser", "qwen3"]).await;
    for (m, out) in [("six times seven", THINKING), ("no tags", "Just 42.")] {
        let rule = json!({"match": m, "output": out});
        let r = support::post(format!("{}/sim/script", sim.url), &rule).await;
        assert_eq!(r.status().as_u16(), 200);
    }
    let q = "what is six times seven?";
    let m = json!({"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": q}]});
    let v: Value = support::post(format!("{}/v1/messages", gw.url), &m)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        v["content"],
        json!([{"type": "thinking", "thinking": "Six times seven: 6*7 = 42 🦙.\n", "signature": ""},
               {"type": "text", "text": "The answer is 42."}]),
        "{v}"
    );
    let mut streamed = m.clone();
    streamed["stream"] = json!(true);
    let text = support::post(format!("{}/v1/messages", gw.url), &streamed)
        .await
        .text()
        .await
        .unwrap();
    let (mut thinking, mut answer) = (String::new(), String::new());
    for d in support::sse_data(&text) {
        let v: Value = serde_json::from_str(&d).unwrap();
        thinking.push_str(v["delta"]["thinking"].as_str().unwrap_or_default());
        answer.push_str(v["delta"]["text"].as_str().unwrap_or_default());
    }
    assert_eq!(
        (thinking.as_str(), answer.as_str()),
        ("\nSix times seven: 6*7 = 42 🦙.\n", "\n\nThe answer is 42.")
    );
    // qwen3 starts inside the reasoning unless thinking is off: an untagged answer is all
    // thinking by default, all text with `thinking: disabled`.
    let untagged = |thinking: Value| {
        let mut b = json!({"model": MODEL, "max_tokens": 64,
            "messages": [{"role": "user", "content": "no tags please"}]});
        if !thinking.is_null() {
            b["thinking"] = thinking;
        }
        b
    };
    for (thinking, block) in [
        (
            Value::Null,
            json!({"type": "thinking", "thinking": "Just 42.", "signature": ""}),
        ),
        (
            json!({"type": "disabled"}),
            json!({"type": "text", "text": "Just 42."}),
        ),
    ] {
        let v: Value = support::post(format!("{}/v1/messages", gw.url), &untagged(thinking))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["content"], json!([block]), "{v}");
    }
    let r = json!({"model": MODEL, "input": q, "max_output_tokens": 64});
    let v: Value = support::post(format!("{}/v1/responses", gw.url), &r)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["output"][0]["type"], "reasoning", "{v}");
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "Six times seven: 6*7 = 42 🦙.\n"
    );
    assert_eq!(v["output"][1]["content"][0]["text"], "The answer is 42.");
}
