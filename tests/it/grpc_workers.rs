//! The gateway in front of `grpc://` workers (simulators in `--grpc-mode`, speaking SGLang's
//! `SglangScheduler`): the OpenAI routes and `/generate` on the token-id path, and the fault
//! rows of docs/reliability.md over gRPC (a worker's statuses, a reset stream, a client that
//! leaves, a stall). A sim's HTTP routes (faults, request log, metrics) are on its side port.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{self, Proc, MODEL};

pub(crate) const FAST: &[&str] = &["--time-scale", "0.01"];

pub(crate) async fn sim_requests(sim: &Proc) -> f64 {
    support::sim_metric(sim.http_url(), "sim_requests_received_total").await
}

async fn aborts_received(sim: &Proc) -> f64 {
    support::sim_metric(sim.http_url(), "sim_abort_requests_received_total").await
}

pub(crate) fn chat(content: &str, max_tokens: u32, stream: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
        "stream": stream, "stream_options": {"include_usage": true}, "ignore_eos": true})
}

/// A streamed chat: (status, content, usage completion tokens, `[DONE]` seen, error event seen).
pub(crate) async fn stream_chat(gw: &Proc, body: &Value) -> (u16, String, u64, bool, bool) {
    let r = support::post(format!("{}/v1/chat/completions", gw.url), body).await;
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    let (content, done) = support::chat_stream_content(&text);
    let mut usage = 0;
    let mut error = false;
    for d in support::sse_data(&text) {
        if let Ok(v) = serde_json::from_str::<Value>(&d) {
            error |= v.get("error").is_some();
            usage = v["usage"]["completion_tokens"].as_u64().unwrap_or(usage);
        }
    }
    (status, content, usage, done, error)
}

async fn gateway_idle(gw: &Proc) {
    support::eventually("gateway in-flight back to 0", || async {
        support::gateway_in_flight(&gw.url).await == 0.0
    })
    .await;
}

#[tokio::test]
async fn chat_completions_and_generate_through_grpc_workers() {
    let (a, b) = (support::grpc_sim(FAST).await, support::grpc_sim(FAST).await);
    let gw = support::gateway(&[&a, &b], &["--policy", "round_robin"]).await;
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    for i in 0..2 {
        let r = support::post(
            format!("{}/v1/chat/completions", gw.url),
            &chat(&format!("q{i}"), 12, false),
        )
        .await;
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.expect("json");
        let content = v["choices"][0]["message"]["content"]
            .as_str()
            .expect("content");
        assert_eq!(tok.encode(content, false).expect("encode").len(), 12, "{v}");
        assert_eq!(v["usage"]["completion_tokens"], 12);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
    }
    let (status, content, usage, done, error) = stream_chat(&gw, &chat("s", 16, true)).await;
    assert_eq!((status, usage, done, error), (200, 16, true, false));
    assert_eq!(tok.encode(&content, false).expect("encode").len(), 16);
    // Both workers served (one connection each, the gateway's own).
    assert!(sim_requests(&a).await >= 1.0 && sim_requests(&b).await >= 1.0);

    // `/generate`: translated onto the token-id path, answered in SGLang's shape.
    let body = json!({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 6, "ignore_eos": true}});
    let v: Value = support::post(format!("{}/generate", gw.url), &body)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(v["meta_info"]["completion_tokens"], 6, "{v}");
    assert_eq!(v["meta_info"]["finish_reason"]["type"], "length");
    assert_eq!(v["output_ids"].as_array().map(Vec::len), Some(6));
    let decoded = tok
        .decode(
            &serde_json::from_value::<Vec<u32>>(v["output_ids"].clone()).unwrap(),
            true,
        )
        .unwrap();
    assert_eq!(v["text"], decoded.as_str());
    let streamed = support::post(
        format!("{}/generate", gw.url),
        &json!({"text": "hi", "stream": true, "sampling_params": {"max_new_tokens": 5, "ignore_eos": true}}),
    )
    .await
    .text()
    .await
    .unwrap();
    let events = support::sse_data(&streamed);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["meta_info"]["completion_tokens"], 5, "{streamed}");

    // What only a worker's own HTTP route can serve has nowhere to go: a clear 400.
    let forwarded = json!({"input_ids": [5, 6, 7], "return_logprob": true});
    let r = support::post(format!("{}/generate", gw.url), &forwarded).await;
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "unsupported_on_grpc_workers", "{v}");
    gateway_idle(&gw).await;
}

#[tokio::test]
async fn forwarded_requests_go_to_the_http_workers_of_a_mixed_fleet() {
    let (g, h) = (support::grpc_sim(FAST).await, support::sim(FAST).await);
    let gw = support::gateway(&[&g, &h], &["--policy", "round_robin"]).await;
    for i in 0..4 {
        let body = json!({"text": format!("f{i}"), "return_logprob": true,
            "sampling_params": {"max_new_tokens": 4}});
        let r = support::post(format!("{}/generate", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200, "request {i}");
    }
    assert_eq!(sim_requests(&g).await, 0.0, "the gRPC worker got none");
    assert_eq!(sim_requests(&h).await, 4.0);
}

/// `logprobs` over gRPC (`return_logprob`, `top_logprobs_num` in `GenerateRequest`; the
/// chunks' `output_logprobs`): the same answer, logprobs included, as from the same sim over
/// HTTP, whose path is checked against the worker's own OpenAI route — chat and completions,
/// whole and streamed.
#[tokio::test]
async fn logprobs_over_grpc_equal_the_http_workers() {
    let (g, h) = (support::grpc_sim(FAST).await, support::sim(FAST).await);
    let via_grpc = support::gateway(&[&g], &[]).await;
    let via_http = support::gateway(&[&h], &[]).await;
    let mut chat_body = chat("logprobs please", 6, false);
    chat_body["logprobs"] = json!(true);
    chat_body["top_logprobs"] = json!(3);
    let completion = json!({"model": MODEL, "prompt": "logprobs please", "max_tokens": 6,
        "logprobs": 2, "ignore_eos": true});
    for (route, mut body) in [("chat/completions", chat_body), ("completions", completion)] {
        for stream in [false, true] {
            body["stream"] = json!(stream);
            let mut answers = Vec::new();
            for gw in [&via_grpc, &via_http] {
                let r = support::post(format!("{}/v1/{route}", gw.url), &body).await;
                assert_eq!(r.status().as_u16(), 200, "{route} stream={stream}");
                let text = r.text().await.unwrap_or_default();
                // Streamed: the logprobs of every chunk, in order; whole: the choice's.
                let logprobs: Vec<Value> = if stream {
                    support::sse_data(&text)
                        .iter()
                        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                        .map(|v| v["choices"][0]["logprobs"].clone())
                        .filter(|l| !l.is_null())
                        .collect()
                } else {
                    let v: Value = serde_json::from_str(&text).expect("json");
                    vec![v["choices"][0]["logprobs"].clone()]
                };
                // One entry per token, whatever the chunking was.
                let entries: Vec<Value> = logprobs
                    .iter()
                    .flat_map(|l| match l["content"].as_array() {
                        Some(content) => content.clone(),
                        None => (0..l["tokens"].as_array().map_or(0, Vec::len))
                            .map(|i| {
                                json!([
                                    l["tokens"][i],
                                    l["token_logprobs"][i],
                                    l["top_logprobs"][i],
                                    l["text_offset"][i]
                                ])
                            })
                            .collect(),
                    })
                    .collect();
                assert_eq!(entries.len(), 6, "{route} stream={stream}: {text}");
                answers.push(entries);
            }
            // The wire's logprobs are 32-bit floats: equal to the JSON ones to float precision.
            assert!(
                close(&json!(answers[0]), &json!(answers[1])),
                "{route} stream={stream}: {:?} vs {:?}",
                answers[0],
                answers[1]
            );
        }
    }
}

/// Equal JSON, numbers within 1e-5.
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-5,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| close(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}

#[tokio::test]
async fn internal_status_before_the_first_token_is_a_502_not_a_retry() {
    let (a, b) = (support::grpc_sim(FAST).await, support::grpc_sim(FAST).await);
    let gw = support::gateway(&[&a, &b], &["--policy", "round_robin"]).await;
    support::set_faults(&a, json!({"error_rate": 1.0})).await;
    support::set_faults(&b, json!({"error_rate": 1.0})).await;
    let r = support::post(
        format!("{}/v1/chat/completions", gw.url),
        &chat("e", 4, false),
    )
    .await;
    assert_eq!(r.status().as_u16(), 502);
    // INTERNAL is SGLang's 500: the worker may have started, so nothing is sent twice.
    assert_eq!(sim_requests(&a).await + sim_requests(&b).await, 1.0);
    gateway_idle(&gw).await;
}

#[tokio::test]
async fn unavailable_queue_full_is_retried_on_another_worker() {
    let full = support::grpc_sim(&[
        "--max-running-requests",
        "1",
        "--max-queued-requests",
        "0",
        "--decode-base-us",
        "20000",
    ])
    .await;
    // The full worker's one slot, taken through its HTTP side port.
    let hog = json!({"input_ids": [7, 8, 9], "sampling_params": {"max_new_tokens": 5000, "ignore_eos": true}, "stream": true});
    let mut hog = support::post(format!("{}/generate", full.http_url()), &hog).await;
    hog.chunk().await.expect("the hog's first chunk");
    let other = support::grpc_sim(FAST).await;
    let gw = support::gateway(&[&full, &other], &["--policy", "round_robin"]).await;
    for i in 0..2 {
        let (status, _, usage, done, _) = stream_chat(&gw, &chat(&format!("r{i}"), 4, true)).await;
        assert_eq!((status, usage, done), (200, 4, true), "request {i}");
    }
    assert_eq!(sim_requests(&other).await, 2.0);
    let m = support::metrics_text(&gw.url).await;
    assert!(support::metric_sum(&m, "switchboard_retries_total") >= 1.0);
}

#[tokio::test]
async fn reset_mid_stream_migrates_without_repeating_or_losing_tokens() {
    let (a, b) = (support::grpc_sim(FAST).await, support::grpc_sim(FAST).await);
    let gw = support::gateway(&[&a, &b], &["--policy", "round_robin"]).await;
    // Every generation that starts on `a` is reset after 5 tokens and must continue on `b`.
    support::set_faults(&a, json!({"die_after_tokens": 5})).await;
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    for i in 0..4 {
        let (status, content, usage, done, error) =
            stream_chat(&gw, &chat(&format!("m{i}"), 20, true)).await;
        assert!(!error, "request {i} failed instead of migrating: {content}");
        assert_eq!((status, usage, done), (200, 20, true), "request {i}");
        assert_eq!(
            tok.encode(&content, false).expect("encode").len(),
            20,
            "request {i}: {content:?}"
        );
    }
    let m = support::metrics_text(&gw.url).await;
    let continued = support::metric_sum(&m, "switchboard_migrations_total{outcome=\"continued\"}");
    assert!(continued >= 1.0);
    assert_eq!(
        sim_requests(&a).await + sim_requests(&b).await,
        4.0 + continued
    );
    let seen = support::sim_request_log(b.http_url()).await;
    assert!(
        seen.iter()
            .any(|r| r["rid"].as_str().is_some_and(|s| s.ends_with("-m1"))
                && r["max_new_tokens"] == 15),
        "{seen:?}"
    );
    gateway_idle(&gw).await;
}

#[tokio::test]
async fn client_disconnect_sends_the_abort_rpc_at_once() {
    let a = support::grpc_sim(&["--decode-base-us", "20000"]).await;
    let gw = support::gateway(&[&a], &[]).await;
    let mut r = support::post(
        format!("{}/v1/chat/completions", gw.url),
        &chat("leave", 2000, true),
    )
    .await;
    r.chunk().await.expect("a first chunk");
    assert_eq!(aborts_received(&a).await, 0.0);
    drop(r);
    let left = Instant::now();
    let limit = Duration::from_secs(1);
    while aborts_received(&a).await < 1.0 {
        assert!(
            left.elapsed() < limit,
            "no Abort RPC within {limit:?} of the client leaving"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rid = support::sim_request_log(a.http_url()).await[0]["rid"].clone();
    assert!(rid.as_str().is_some_and(|r| r.len() == 32), "{rid}");
    support::eventually("worker idle", || async {
        support::sim_busy(a.http_url()).await == 0
    })
    .await;
    gateway_idle(&gw).await;
}

#[tokio::test]
async fn stall_before_the_first_token_times_out_with_504_and_aborts() {
    let a = support::grpc_sim(FAST).await;
    let gw = support::gateway(&[&a], &["--ttft-timeout-secs", "1"]).await;
    support::set_faults(&a, json!({"stall_secs": 5.0, "stall_after_tokens": 0})).await;
    let r = support::post(
        format!("{}/v1/chat/completions", gw.url),
        &chat("s", 5, true),
    )
    .await;
    assert_eq!(r.status().as_u16(), 504);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "upstream_timeout");
    support::sim_aborted_and_idle(a.http_url()).await;
    gateway_idle(&gw).await;
}
