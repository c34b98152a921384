//! `n > 1` on the simulator's OpenAI routes: n different generations by `index`, usage with the
//! prompt once and the completions summed (SGLang's `serving_chat` / `serving_completions`).
//! (The gateway generates the choices itself on `/generate`: `openai_choices`.)

use crate::support::{self, MODEL};

use serde_json::{json, Value};
use std::collections::BTreeMap;

const TOKENS: usize = 5;

fn chat_body(n: i64, stream: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "tell me"}],
           "n": n, "max_tokens": TOKENS, "ignore_eos": true, "stream": stream,
           "stream_options": {"include_usage": true}})
}

fn text_body(n: i64, stream: bool) -> Value {
    json!({"model": MODEL, "prompt": "tell me", "n": n, "max_tokens": TOKENS,
           "ignore_eos": true, "stream": stream, "stream_options": {"include_usage": true}})
}

async fn answer(url: String, body: &Value) -> Value {
    let r = support::post(url, body).await;
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.expect("json")
}

async fn events(url: String, body: &Value) -> Vec<Value> {
    let r = support::post(url, body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("body");
    let data = support::sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    data.iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// Each text differs from the others and re-encodes to exactly its `TOKENS` ids.
fn assert_distinct_generations(texts: &[String]) {
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    for t in texts {
        assert_eq!(tok.encode(t, false).expect("encode").len(), TOKENS, "{t:?}");
    }
    for (i, a) in texts.iter().enumerate() {
        assert!(texts[i + 1..].iter().all(|b| b != a), "{texts:?}");
    }
}

fn choice_texts(v: &Value, field: &str) -> Vec<String> {
    let choices = v["choices"].as_array().expect("choices");
    choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            assert_eq!(c["index"], i);
            assert_eq!(c["finish_reason"], "length");
            let text = if field == "content" {
                &c["message"]["content"]
            } else {
                &c["text"]
            };
            text.as_str().expect("text").to_owned()
        })
        .collect()
}

/// Non-streaming: n choices by index; usage counts the prompt once, sums the completions.
async fn check_whole(base: &str) {
    let one = answer(format!("{base}/v1/chat/completions"), &chat_body(1, false)).await;
    let prompt = one["usage"]["prompt_tokens"].as_u64().expect("prompt");
    let v = answer(format!("{base}/v1/chat/completions"), &chat_body(3, false)).await;
    let texts = choice_texts(&v, "content");
    assert_eq!(texts.len(), 3, "{v}");
    assert_distinct_generations(&texts);
    assert_eq!(v["usage"]["prompt_tokens"], prompt, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3 * TOKENS, "{v}");
    assert_eq!(v["usage"]["total_tokens"], prompt + 3 * TOKENS as u64);

    let v = answer(format!("{base}/v1/completions"), &text_body(2, false)).await;
    let texts = choice_texts(&v, "text");
    assert_eq!(texts.len(), 2, "{v}");
    assert_distinct_generations(&texts);
    assert_eq!(v["usage"]["completion_tokens"], 2 * TOKENS, "{v}");
}

/// The streamed content of each index, and the events that came after the last content.
fn split_stream(chunks: &[Value], field: &str) -> (Vec<String>, BTreeMap<u64, String>) {
    let mut texts: BTreeMap<u64, String> = BTreeMap::new();
    let mut finishes = BTreeMap::new();
    for c in chunks {
        for choice in c["choices"].as_array().into_iter().flatten() {
            let index = choice["index"].as_u64().expect("index");
            let piece = if field == "content" {
                &choice["delta"]["content"]
            } else {
                &choice["text"]
            };
            texts
                .entry(index)
                .or_default()
                .push_str(piece.as_str().unwrap_or(""));
            if let Some(f) = choice["finish_reason"].as_str() {
                finishes.insert(index, f.to_owned());
            }
        }
    }
    (texts.into_values().collect(), finishes)
}

async fn check_stream(base: &str) {
    let chunks = events(format!("{base}/v1/chat/completions"), &chat_body(2, true)).await;
    let (texts, finishes) = split_stream(&chunks, "content");
    assert_eq!(texts.len(), 2, "{chunks:?}");
    assert_distinct_generations(&texts);
    assert_eq!(finishes.len(), 2, "{chunks:?}");
    // Chat sends both finish chunks after all content, then the one usage chunk.
    let n = chunks.len();
    for c in &chunks[n - 3..n - 1] {
        assert!(c["choices"][0]["finish_reason"].is_string(), "{chunks:?}");
    }
    assert!(chunks[..n - 3]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));
    assert_eq!(chunks[n - 1]["usage"]["completion_tokens"], 2 * TOKENS);
    // Each choice is its own sub-request, with its own id.
    let id_of = |i: u64| {
        chunks
            .iter()
            .find(|c| c["choices"][0]["index"] == i)
            .map(|c| c["id"].clone())
    };
    assert_ne!(id_of(0), id_of(1));

    let chunks = events(format!("{base}/v1/completions"), &text_body(2, true)).await;
    let (texts, finishes) = split_stream(&chunks, "text");
    assert_distinct_generations(&texts);
    assert_eq!(finishes.len(), 2, "{chunks:?}");
    let last = chunks.last().expect("usage chunk");
    assert_eq!(last["usage"]["completion_tokens"], 2 * TOKENS, "{last}");
}

#[tokio::test]
async fn n_choices_from_the_sim() {
    for version in ["0.5.9", "0.5.23"] {
        let sim = support::sim(&["--sglang-version", version, "--zero-latency"]).await;
        check_whole(&sim.url).await;
        check_stream(&sim.url).await;
    }
}
