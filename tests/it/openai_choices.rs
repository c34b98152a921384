//! `n > 1` and batched completion prompts on the token-id path: each choice is its own
//! `/generate` request with our ids (rid `<rid>-c<choice>`), on the worker the first one was
//! routed to; choices numbered `prompt * n + sample` (SGLang's order); usage with each prompt
//! once and the completions summed; one `[DONE]`. The worker's own OpenAI route is never used.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::support::{self, pd, scripted, sim_request_log, Proc, MODEL};

const TOKENS: usize = 5;

async fn post(url: String, body: &Value) -> (String, String) {
    let r = support::post(url, body).await;
    assert_eq!(r.status().as_u16(), 200);
    let rid = r.headers()["x-request-id"]
        .to_str()
        .expect("rid")
        .to_owned();
    (rid, r.text().await.expect("body"))
}

fn chat(n: usize, stream: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "tell me"}], "n": n,
           "max_tokens": TOKENS, "ignore_eos": true, "stream": stream,
           "stream_options": {"include_usage": true}})
}

/// What the worker at `url` got for `rid`'s choices, by rid; nothing came to an OpenAI route.
async fn choices_sent(url: &str, rid: &str) -> BTreeMap<String, Value> {
    let log = sim_request_log(url).await;
    assert!(
        log.iter()
            .all(|s| s["route"] != "/v1/chat/completions" && s["route"] != "/v1/completions"),
        "{log:?}"
    );
    log.into_iter()
        .filter(|s| s["rid"].as_str().is_some_and(|r| r.starts_with(rid)))
        .map(|s| (s["rid"].as_str().unwrap_or_default().to_owned(), s))
        .collect()
}

/// Per index: the streamed text (`field` of the delta or choice), and its finish reason.
fn by_index(events: &[Value], chat: bool) -> BTreeMap<u64, (String, Option<String>)> {
    let mut out: BTreeMap<u64, (String, Option<String>)> = BTreeMap::new();
    for e in events {
        for c in e["choices"].as_array().into_iter().flatten() {
            let slot = out.entry(c["index"].as_u64().expect("index")).or_default();
            let piece = if chat {
                &c["delta"]["content"]
            } else {
                &c["text"]
            };
            slot.0.push_str(piece.as_str().unwrap_or(""));
            if let Some(f) = c["finish_reason"].as_str() {
                slot.1 = Some(f.to_owned());
            }
        }
    }
    out
}

fn events(body: &str) -> Vec<Value> {
    let data = support::sse_data(body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
    assert_eq!(data.iter().filter(|d| *d == "[DONE]").count(), 1);
    data.iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[tokio::test]
async fn n_chat_choices_are_generations_of_their_own_on_generate() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let url = format!("{}/v1/chat/completions", gw.url);
    let (_, one) = post(url.clone(), &chat(1, false)).await;
    let one: Value = serde_json::from_str(&one).expect("json");
    let text = one["choices"][0]["message"]["content"].clone();
    let prompt = one["usage"]["prompt_tokens"].as_u64().expect("prompt");

    let (rid, whole) = post(url.clone(), &chat(3, false)).await;
    let v: Value = serde_json::from_str(&whole).expect("json");
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 3, "{v}");
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["finish_reason"], "length");
        // The sim's output depends on the prompt only: each choice is that generation.
        assert_eq!(c["message"]["content"], text, "{v}");
    }
    assert_eq!(v["usage"]["prompt_tokens"], prompt, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3 * TOKENS, "{v}");
    let sent = choices_sent(&sim.url, &rid).await;
    let rids: Vec<&String> = sent.keys().collect();
    assert_eq!(
        rids,
        ["c0000", "c0001", "c0002"]
            .map(|c| format!("{rid}-{c}"))
            .iter()
            .collect::<Vec<_>>()
    );
    for s in sent.values() {
        assert_eq!(s["route"], "/generate");
        assert_eq!(
            s["input_ids"].as_array().map(Vec::len),
            Some(prompt as usize)
        );
        assert!(
            s["sampling_params"].get("n").is_none_or(|n| n.is_null()),
            "{s}"
        );
    }

    let (rid, streamed) = post(url, &chat(3, true)).await;
    let chunks = events(&streamed);
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one id for all: {ids:?}"
    );
    let got = by_index(&chunks, true);
    assert_eq!(got.len(), 3, "{streamed}");
    for (text_i, finish) in got.values() {
        assert_eq!(text_i, text.as_str().expect("text"));
        assert_eq!(finish.as_deref(), Some("length"));
    }
    // SGLang's chat order: the finish chunks after all content, then the one usage chunk.
    let n = chunks.len();
    assert!(chunks[n - 4..n - 1]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"] == "length"));
    assert_eq!(chunks[n - 1]["usage"]["completion_tokens"], 3 * TOKENS);
    assert_eq!(chunks[n - 1]["usage"]["prompt_tokens"], prompt);
    assert_eq!(choices_sent(&sim.url, &rid).await.len(), 3);
}

#[tokio::test]
async fn batched_prompts_are_numbered_prompt_by_sample() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let url = format!("{}/v1/completions", gw.url);
    let body = |prompt: Value, n: usize, stream: bool| {
        json!({"model": MODEL, "prompt": prompt, "n": n, "max_tokens": TOKENS,
               "ignore_eos": true, "stream": stream, "echo": !stream,
               "stream_options": {"include_usage": true}})
    };
    let mut single = Vec::new();
    for p in ["first prompt", "the second one"] {
        let (_, v) = post(url.clone(), &body(json!(p), 1, false)).await;
        let v: Value = serde_json::from_str(&v).expect("json");
        single.push((
            v["choices"][0]["text"].as_str().expect("text").to_owned(),
            v["usage"]["prompt_tokens"].as_u64().expect("prompt"),
        ));
    }
    let batch = json!(["first prompt", "the second one"]);
    let (rid, whole) = post(url.clone(), &body(batch.clone(), 2, false)).await;
    let v: Value = serde_json::from_str(&whole).expect("json");
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 4, "{v}");
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        // Echoed: each choice starts with its own prompt.
        assert_eq!(c["text"].as_str(), Some(single[i / 2].0.as_str()), "{v}");
    }
    assert_eq!(
        v["usage"]["prompt_tokens"],
        single[0].1 + single[1].1,
        "each prompt once: {v}"
    );
    assert_eq!(v["usage"]["completion_tokens"], 4 * TOKENS);
    let sent = choices_sent(&sim.url, &rid).await;
    let lens: Vec<usize> = sent
        .values()
        .map(|s| s["input_ids"].as_array().map_or(0, Vec::len))
        .collect();
    let (a, b) = (single[0].1 as usize, single[1].1 as usize);
    assert_eq!(lens, [a, a, b, b], "{sent:?}");

    let (_, streamed) = post(url, &body(batch, 2, true)).await;
    let chunks = events(&streamed);
    let got = by_index(&chunks, false);
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (i, (text, finish)) in &got {
        let echoed = &single[*i as usize / 2].0;
        let prompt = if *i < 2 {
            "first prompt"
        } else {
            "the second one"
        };
        assert_eq!(Some(text.as_str()), echoed.strip_prefix(prompt));
        assert_eq!(finish.as_deref(), Some("length"));
    }
    let last = chunks.last().expect("usage");
    assert_eq!(last["usage"]["completion_tokens"], 4 * TOKENS);
}

/// Chat `n = 2` on a worker with no OpenAI route at all: a gRPC worker and a PD pair.
async fn two_choices(gw: &Proc) -> String {
    let (rid, whole) = post(format!("{}/v1/chat/completions", gw.url), &chat(2, false)).await;
    let v: Value = serde_json::from_str(&whole).expect("json");
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2, "{v}");
    assert_eq!(
        choices[0]["message"]["content"],
        choices[1]["message"]["content"]
    );
    assert_eq!(v["usage"]["completion_tokens"], 2 * TOKENS);
    let (_, streamed) = post(format!("{}/v1/chat/completions", gw.url), &chat(2, true)).await;
    assert_eq!(by_index(&events(&streamed), true).len(), 2, "{streamed}");
    rid
}

#[tokio::test]
async fn n_choices_on_grpc_workers_and_pd_pairs() {
    let g = support::grpc_sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&g], &[]).await;
    let rid = two_choices(&gw).await;
    assert_eq!(choices_sent(g.http_url(), &rid).await.len(), 2);

    let p = pd::prefill_sim(&["--zero-latency"]).await;
    let d = pd::decode_sim(&["--zero-latency"]).await;
    let gw = pd::pd_gateway(&[&p], &[&d], &[]).await;
    let rid = two_choices(&gw).await;
    assert_eq!(choices_sent(&p.sim.url, &rid).await.len(), 2);
    assert_eq!(choices_sent(&d.url, &rid).await.len(), 2);
}

#[tokio::test]
async fn a_client_leaving_aborts_every_choice() {
    let sim = support::sim(&["--decode-base-us", "50000"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let mut body = chat(3, true);
    body["max_tokens"] = json!(400);
    let mut r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    r.chunk().await.expect("a first chunk");
    drop(r);
    support::eventually("every choice aborted", || async {
        support::sim_metric(&sim.url, "sim_abort_requests_received_total").await >= 3.0
    })
    .await;
    support::eventually("worker idle", || async {
        support::sim_busy(&sim.url).await == 0
    })
    .await;
    assert_eq!(support::gateway_in_flight(&gw.url).await, 0.0);
}

#[tokio::test]
async fn a_worker_dying_on_one_choice_moves_that_choice_only() {
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    let answer = "one two three four five six";
    let ids = tok.encode(answer, false).expect("encode");
    let (first, rest) = (ids[..3].to_vec(), ids[3..].to_vec());
    let all = ids.clone();
    let t = tok;
    // Choice 1's first leg dies after three ids; its continuation (`…-m1`) sends the rest.
    let reply: scripted::Reply = Arc::new(move |req: &Value| {
        let rid = req["rid"].as_str().unwrap_or_default();
        if rid.ends_with("-c0001") {
            scripted::body(
                scripted::cumulative(&t, &first, "", false),
                scripted::End::Reset,
            )
        } else if rid.ends_with("-c0001-m1") {
            scripted::body(
                scripted::cumulative(&t, &rest, "", true),
                scripted::End::Done,
            )
        } else {
            scripted::body(
                scripted::cumulative(&t, &all, "", true),
                scripted::End::Done,
            )
        }
    });
    let (a, seen_a) = scripted::worker(Arc::clone(&reply)).await;
    let (b, seen_b) = scripted::worker(reply).await;
    let gw = support::gateway(
        &[],
        &["--worker-urls", &a, &b, "--load-poll-interval-ms", "0"],
    )
    .await;
    support::ready(&gw).await;
    let body = json!({"model": MODEL, "max_tokens": ids.len(), "stream": true, "n": 3,
                      "messages": [{"role": "user", "content": "count"}]});
    let (rid, streamed) = post(format!("{}/v1/chat/completions", gw.url), &body).await;
    let got = by_index(&events(&streamed), true);
    assert_eq!(got.len(), 3, "{streamed}");
    for (text, finish) in got.values() {
        assert_eq!(text, answer, "{streamed}");
        assert_eq!(finish.as_deref(), Some("length"));
    }
    let sent: Vec<Value> = seen_a
        .generate()
        .into_iter()
        .chain(seen_b.generate())
        .collect();
    let rids: Vec<&str> = sent.iter().filter_map(|s| s["rid"].as_str()).collect();
    assert_eq!(
        rids.len(),
        4,
        "three choices and one continuation: {rids:?}"
    );
    let moved = sent
        .iter()
        .find(|s| s["rid"] == format!("{rid}-c0001-m1"))
        .expect("choice 1 continued");
    let prompt = sent[0]["input_ids"].as_array().expect("ids").len();
    assert_eq!(
        moved["input_ids"].as_array().map(Vec::len),
        Some(prompt + 3),
        "the prompt and the three relayed ids"
    );
}

#[tokio::test]
async fn fields_once_forwarded_are_served_or_refused_here() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let url = format!("{}/v1/chat/completions", gw.url);
    let mut body = chat(1, false);
    body["logit_bias"] = json!({"42": 5.0});
    body["verbosity"] = json!("low");
    body["prediction"] = json!({"type": "content", "content": "x"});
    body["reasoning_effort"] = json!("high");
    let (rid, _) = post(url.clone(), &body).await;
    let sent = choices_sent(&sim.url, &rid).await;
    let s = sent.values().next().expect("sent");
    assert_eq!(s["route"], "/generate");
    assert_eq!(s["sampling_params"]["logit_bias"], json!({"42": 5.0}));

    let refused = [
        ("logit_bias", json!({"99999999": 1.0})),
        ("reasoning_effort", json!("extreme")),
        ("web_search_options", json!({})),
        ("audio", json!({"voice": "alloy", "format": "mp3"})),
        ("modalities", json!(["text", "audio"])),
        ("lora_path", json!("adapter")),
    ];
    for (field, value) in refused {
        let mut body = chat(1, false);
        body[field] = value;
        let r = support::post(url.clone(), &body).await;
        assert_eq!(r.status().as_u16(), 400, "{field}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["error"]["param"], field, "{v}");
    }
    let text = json!({"model": MODEL, "prompt": "hi", "max_tokens": 2, "n": 2, "best_of": 3});
    let r = support::post(format!("{}/v1/completions", gw.url), &text).await;
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["param"], "best_of", "{v}");
}
