//! `logprobs` on the simulator's OpenAI routes, in SGLang's shapes (docs/simulator.md), and
//! the gateway relaying them intact, also with `n > 1`.

use crate::support::{self, MODEL};

use serde_json::{json, Value};

const TOKENS: usize = 5;

async fn post_json(url: String, body: Value) -> Value {
    let r = support::post(url, &body).await;
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.expect("json")
}

async fn post_events(url: String, body: Value) -> Vec<Value> {
    let r = support::post(url, &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("body");
    support::sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

fn chat(n: u32, stream: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "n": n,
           "max_tokens": TOKENS, "ignore_eos": true, "stream": stream,
           "logprobs": true, "top_logprobs": 3})
}

/// One chat `content` entry: a logprob ≤ 0, its bytes, and a top list led by the token itself
/// in falling order.
fn check_chat_entry(e: &Value) -> String {
    let token = e["token"].as_str().expect("token").to_owned();
    let logprob = e["logprob"].as_f64().expect("logprob");
    assert!(logprob <= 0.0, "{e}");
    assert_eq!(e["bytes"], json!(token.as_bytes()), "{e}");
    let top = e["top_logprobs"].as_array().expect("top");
    assert_eq!(top.len(), 3, "{e}");
    assert_eq!(top[0]["token"], token.as_str(), "{e}");
    assert_eq!(top[0]["logprob"].as_f64(), Some(logprob));
    let lps: Vec<f64> = top.iter().filter_map(|t| t["logprob"].as_f64()).collect();
    assert!(lps.windows(2).all(|w| w[0] >= w[1]), "{e}");
    token
}

/// Per index: the joined text and the joined tokens of its logprobs.
async fn check_chat(base: &str, n: u32) {
    let v = post_json(format!("{base}/v1/chat/completions"), chat(n, false)).await;
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), n as usize, "{v}");
    for c in choices {
        let content = c["logprobs"]["content"].as_array().expect("content");
        assert_eq!(content.len(), TOKENS, "{c}");
        let tokens: String = content.iter().map(check_chat_entry).collect();
        assert_eq!(Some(tokens.as_str()), c["message"]["content"].as_str());
    }

    let chunks = post_events(format!("{base}/v1/chat/completions"), chat(n, true)).await;
    for index in 0..n {
        let mut text = String::new();
        let mut tokens = String::new();
        for c in chunks.iter().filter(|c| c["choices"][0]["index"] == index) {
            let choice = &c["choices"][0];
            text.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
            for e in choice["logprobs"]["content"]
                .as_array()
                .into_iter()
                .flatten()
            {
                tokens.push_str(&check_chat_entry(e));
            }
        }
        assert!(!text.is_empty(), "{chunks:?}");
        assert_eq!(tokens, text, "index {index}");
    }
}

#[tokio::test]
async fn chat_logprobs_from_the_sim() {
    let sim = support::sim(&["--zero-latency"]).await;
    check_chat(&sim.url, 1).await;
    // Not asked: `null`, as before.
    let mut plain = chat(1, false);
    plain["logprobs"] = json!(false);
    let v = post_json(format!("{}/v1/chat/completions", sim.url), plain).await;
    assert!(v["choices"][0]["logprobs"].is_null(), "{v}");
}

#[tokio::test]
async fn completion_logprobs_from_the_sim() {
    let sim = support::sim(&["--zero-latency"]).await;
    let body = json!({"model": MODEL, "prompt": "hello", "max_tokens": TOKENS,
                      "ignore_eos": true, "logprobs": 2});
    let v = post_json(format!("{}/v1/completions", sim.url), body.clone()).await;
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["text_offset"], json!(vec![-1; TOKENS]), "{v}");
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        Some(tokens.concat().as_str()),
        v["choices"][0]["text"].as_str()
    );
    let logprobs = lp["token_logprobs"].as_array().expect("token_logprobs");
    let top = lp["top_logprobs"].as_array().expect("top_logprobs");
    assert_eq!((logprobs.len(), top.len()), (TOKENS, TOKENS), "{v}");
    for ((token, logprob), top) in tokens.iter().zip(logprobs).zip(top) {
        assert!(logprob.as_f64().is_some_and(|l| l <= 0.0), "{v}");
        assert_eq!(top.as_object().map(|m| m.len()), Some(2), "{v}");
        assert_eq!(&top[*token], logprob, "{v}");
    }

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let chunks = post_events(format!("{}/v1/completions", sim.url), streamed).await;
    let count: usize = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(count, TOKENS, "{chunks:?}");
}

#[tokio::test]
async fn gateway_relays_logprobs_with_n_choices() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    check_chat(&gw.url, 2).await;
}

#[tokio::test]
async fn generate_logprobs_in_meta_info() {
    let sim = support::sim(&["--zero-latency"]).await;
    let body = json!({"text": "hello there", "return_logprob": true, "top_logprobs_num": 2,
                      "logprob_start_len": 0, "return_text_in_logprobs": true,
                      "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": true}});
    let v = post_json(format!("{}/generate", sim.url), body.clone()).await;
    let meta = &v["meta_info"];
    let out = meta["output_token_logprobs"].as_array().expect("output");
    assert_eq!(out.len(), TOKENS, "{v}");
    let mut text = String::new();
    for (i, t) in out.iter().enumerate() {
        assert!(t[0].as_f64().is_some_and(|l| l <= 0.0), "{t}");
        assert_eq!(t[1], v["output_ids"][i], "{v}");
        text.push_str(t[2].as_str().expect("token text"));
        let top = meta["output_top_logprobs"][i].as_array().expect("top");
        assert_eq!(top.len(), 2, "{v}");
        assert_eq!(top[0], *t, "the sampled token leads its top list");
    }
    assert_eq!(Some(text.as_str()), v["text"].as_str());
    let input = meta["input_token_logprobs"].as_array().expect("input");
    assert_eq!(Some(input.len() as u64), meta["prompt_tokens"].as_u64());
    assert!(
        input[0][0].is_null(),
        "the first prompt token has no logprob: {v}"
    );

    // By default only the last prompt token, no texts, no top lists; cumulative in a stream.
    let body = json!({"text": "hello there", "return_logprob": true, "stream": true,
                      "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": true}});
    let chunks = post_events(format!("{}/generate", sim.url), body).await;
    let last = &chunks.last().expect("a chunk")["meta_info"];
    assert_eq!(
        last["input_token_logprobs"].as_array().map(Vec::len),
        Some(1)
    );
    let out = last["output_token_logprobs"].as_array().expect("output");
    assert_eq!(out.len(), TOKENS, "{last}");
    assert!(out.iter().all(|t| t[2].is_null()), "{last}");
    assert!(last.get("output_top_logprobs").is_none(), "{last}");
}
