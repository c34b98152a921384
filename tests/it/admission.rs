//! Admission control (`--max-concurrent-requests`, `--queue-size`, `--queue-timeout-secs`,
//! `--rate-limit-per-key`) against real processes: slow simulated streams fill the slots.

use crate::support;

use std::time::{Duration, Instant};

use crate::support::{Proc, MODEL};
use serde_json::{json, Value};

/// A worker whose every decode step takes 20 ms, so a 100-token stream lasts about 2 s.
async fn slow_sim() -> Proc {
    support::sim(&["--decode-base-us", "20000", "--eos-probability", "0"]).await
}

fn chat_body(max_tokens: u32, stream: bool) -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "count slowly"}],
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "stream": stream,
    })
}

async fn post(gw: &Proc, body: &Value, key: Option<&str>) -> reqwest::Response {
    let mut req = support::client()
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(body);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    req.send().await.expect("send")
}

/// Asserts a 429 with `Retry-After` and the OpenAI error shape; returns the error object.
async fn expect_429(resp: reqwest::Response, code: &str) -> Value {
    assert_eq!(resp.status().as_u16(), 429);
    let retry_after: u64 = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!(retry_after >= 1);
    let v: Value = resp.json().await.expect("error body is JSON");
    let err = v["error"].clone();
    assert_eq!(err["type"], "rate_limit_exceeded", "{v}");
    assert_eq!(err["code"], code, "{v}");
    assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(err.as_object().is_some_and(|o| o.contains_key("param")));
    err
}

fn count_429(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("switchboard_requests_total{") && l.contains("status=\"429\""))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

#[tokio::test]
async fn streams_hold_slots_until_their_body_ends_then_queue_then_429() {
    let sim = slow_sim().await;
    let gw = support::gateway(
        &[&sim],
        &["--max-concurrent-requests", "2", "--queue-size", "1"],
    )
    .await;

    // Two ~2 s streams take both slots; their headers are back, so their handlers returned.
    let mut first = post(&gw, &chat_body(100, true), None).await;
    let second = post(&gw, &chat_body(100, true), None).await;
    assert_eq!(first.status().as_u16(), 200);
    assert_eq!(second.status().as_u16(), 200);

    // The third waits in the queue: a slot is not freed by a stream's headers.
    let gw_url = gw.url.clone();
    let queued = tokio::spawn(async move {
        let started = Instant::now();
        let r = support::client()
            .post(format!("{gw_url}/v1/chat/completions"))
            .json(&chat_body(1, false))
            .send()
            .await
            .expect("queued send");
        (r.status().as_u16(), started.elapsed())
    });
    // An absence has nothing to poll for: a request that did not wait would be answered
    // well within these 300 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!queued.is_finished(), "the third request did not wait");

    // The fourth finds the one-place queue taken: refused at once.
    let t = Instant::now();
    let overflow = post(&gw, &chat_body(1, false), None).await;
    expect_429(overflow, "queue_full").await;
    assert!(t.elapsed() < Duration::from_secs(1), "refusal was not fast");

    // When the first stream's body ends, the queued request gets its slot.
    let mut text = String::new();
    while let Some(chunk) = first.chunk().await.expect("stream chunk") {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("[DONE]"), "stream did not finish: {text}");
    let (status, waited) = queued.await.expect("queued task");
    assert_eq!(status, 200);
    assert!(
        waited >= Duration::from_millis(300),
        "waited only {waited:?}"
    );

    // Once every stream is over, all slots are free again.
    drop(second.text().await);
    let short = chat_body(1, false);
    let (a, b) = tokio::join!(post(&gw, &short, None), post(&gw, &short, None));
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let metrics = support::metrics_text(&gw.url).await;
    assert_eq!(
        count_429(&metrics),
        1.0,
        "429s counted in switchboard_requests_total"
    );
}

#[tokio::test]
async fn a_request_waiting_past_the_queue_timeout_gets_429() {
    let sim = slow_sim().await;
    let gw = support::gateway(
        &[&sim],
        &[
            "--max-concurrent-requests",
            "1",
            "--queue-timeout-secs",
            "1",
        ],
    )
    .await;
    let long = post(&gw, &chat_body(150, true), None).await;
    assert_eq!(long.status().as_u16(), 200);
    let t = Instant::now();
    let waited = post(&gw, &chat_body(1, false), None).await;
    let elapsed = t.elapsed();
    expect_429(waited, "queue_timeout").await;
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(3),
        "refused after {elapsed:?}"
    );
    drop(long);
}

#[tokio::test]
async fn a_client_leaving_mid_stream_frees_its_slot() {
    let sim = slow_sim().await;
    let gw = support::gateway(
        &[&sim],
        &["--max-concurrent-requests", "1", "--queue-size", "0"],
    )
    .await;
    let stream = post(&gw, &chat_body(500, true), None).await;
    assert_eq!(stream.status().as_u16(), 200);
    // No queue: while the stream runs, another request is refused at once.
    expect_429(post(&gw, &chat_body(1, false), None).await, "queue_full").await;
    // Hanging up drops the response body, and the slot with it (long before 500 tokens).
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = post(&gw, &chat_body(1, false), None).await;
        if r.status().as_u16() == 200 {
            break;
        }
        assert_eq!(r.status().as_u16(), 429);
        assert!(Instant::now() < deadline, "slot not freed after disconnect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn rate_limit_is_per_client_address() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(
        &[&sim],
        &["--rate-limit-per-key", "0.2", "--rate-limit-burst", "2"],
    )
    .await;
    let body = chat_body(1, false);
    for _ in 0..2 {
        assert_eq!(post(&gw, &body, Some("alice")).await.status().as_u16(), 200);
    }
    let resp = post(&gw, &body, Some("alice")).await;
    let retry_after: u64 = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    expect_429(resp, "rate_limit_exceeded").await;
    // 0.2 requests a second: the next token is about 5 s away.
    assert!((1..=5).contains(&retry_after), "Retry-After {retry_after}");
    // The bucket is the client's address: another token (unvalidated) or none draws from it too.
    expect_429(post(&gw, &body, Some("bob")).await, "rate_limit_exceeded").await;
    expect_429(post(&gw, &body, None).await, "rate_limit_exceeded").await;
    // Non-inference routes are never limited.
    let health = support::client()
        .get(format!("{}/health", gw.url))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);
}
