//! `POST /sim/script`: a prompt containing a rule's `match` makes the simulator say exactly the
//! rule's `output` (then stop), on every route, streamed or not, directly and through the
//! gateway; `DELETE /sim/script` clears the rules, later rules win.

use serde_json::{json, Value};

use crate::support::{self, MODEL};

const OUTPUT: &str = "Héllo wörld 🦙, the answer is 42.";

async fn script(sim: &str, matcher: &str, output: &str) -> u16 {
    support::post(
        format!("{sim}/sim/script"),
        &json!({"match": matcher, "output": output}),
    )
    .await
    .status()
    .as_u16()
}

async fn generate(url: &str, text: &str, stream: bool, max_new: u32) -> (String, Value) {
    let body = json!({"text": text, "stream": stream,
                      "sampling_params": {"max_new_tokens": max_new}});
    let r = support::post(format!("{url}/generate"), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("body");
    if !stream {
        let v: Value = serde_json::from_str(&text).expect("json");
        return (
            v["text"].as_str().unwrap_or("").to_owned(),
            v["meta_info"].clone(),
        );
    }
    // Cumulative by default: the last chunk has everything.
    let last = support::sse_data(&text)
        .into_iter()
        .rfind(|d| d != "[DONE]")
        .expect("chunks");
    let v: Value = serde_json::from_str(&last).expect("chunk");
    (
        v["text"].as_str().unwrap_or("").to_owned(),
        v["meta_info"].clone(),
    )
}

async fn chat(url: &str, content: &str, stream: bool) -> (String, String) {
    let body = json!({"model": MODEL, "stream": stream, "max_tokens": 64,
                      "messages": [{"role": "user", "content": content}]});
    let r = support::post(format!("{url}/v1/chat/completions"), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("body");
    if !stream {
        let v: Value = serde_json::from_str(&text).expect("json");
        let c = &v["choices"][0];
        return (
            c["message"]["content"].as_str().unwrap_or("").to_owned(),
            c["finish_reason"].as_str().unwrap_or("").to_owned(),
        );
    }
    let (mut joined, mut finish) = (String::new(), String::new());
    for d in support::sse_data(&text).iter().filter(|d| *d != "[DONE]") {
        let v: Value = serde_json::from_str(d).expect("chunk");
        let c = &v["choices"][0];
        joined.push_str(c["delta"]["content"].as_str().unwrap_or(""));
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_owned();
        }
    }
    (joined, finish)
}

#[tokio::test]
async fn a_scripted_prompt_says_exactly_its_output_on_every_route() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    assert_eq!(script(&sim.url, "what is the answer", "wrong").await, 200);
    // Later rules win.
    assert_eq!(script(&sim.url, "what is the answer", OUTPUT).await, 200);
    for stream in [false, true] {
        let (text, meta) = generate(&sim.url, "tell me: what is the answer?", stream, 64).await;
        assert_eq!(text, OUTPUT, "stream {stream}");
        assert_eq!(meta["finish_reason"]["type"], "stop", "{meta}");
        for url in [&sim.url, &gw.url] {
            let (content, finish) = chat(url, "so what is the answer?", stream).await;
            assert_eq!(
                (content.as_str(), finish.as_str()),
                (OUTPUT, "stop"),
                "{url} stream {stream}"
            );
        }
    }
    // The token budget still applies: cut short, finish "length".
    let (text, meta) = generate(&sim.url, "what is the answer", false, 3).await;
    assert!(
        OUTPUT.starts_with(&text) && text.len() < OUTPUT.len(),
        "{text:?}"
    );
    assert_eq!(meta["finish_reason"]["type"], "length", "{meta}");
    // Other prompts are untouched, and DELETE clears the rules.
    let (other, _) = generate(&sim.url, "something else", false, 8).await;
    assert_ne!(other, OUTPUT);
    let r = support::client()
        .delete(format!("{}/sim/script", sim.url))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status().as_u16(), 200);
    let (after, _) = generate(&sim.url, "what is the answer", false, 64).await;
    assert_ne!(after, OUTPUT);
    // A rule must be well formed.
    let bad = support::post(format!("{}/sim/script", sim.url), &json!({"match": "x"})).await;
    assert_eq!(bad.status().as_u16(), 400);
}

/// Added tokens in the output (Qwen's `<tool_call>`) come out as their own ids.
#[tokio::test]
async fn added_tokens_in_a_script_are_generated_as_their_ids() {
    let qwen = support::repo_path("assets/tokenizers/qwen2.5-0.5b-instruct");
    let sim = support::sim(&["--time-scale", "0.01", "--tokenizer-path", &qwen]).await;
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    assert_eq!(script(&sim.url, "weather in Paris", call).await, 200);
    let body =
        json!({"text": "What is the weather in Paris?", "sampling_params": {"max_new_tokens": 64}});
    let r = support::post(format!("{}/generate", sim.url), &body).await;
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["text"], call, "{v}");
    let ids: Vec<u64> = v["output_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert_eq!(
        ids.first(),
        Some(&151657),
        "<tool_call> is one added token: {ids:?}"
    );
}
