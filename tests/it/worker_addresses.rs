//! Clients must not learn the fleet's addresses (issue 14, defect 11): when a request fails on a
//! worker (connection refused, a 500, an answer cut short, a death mid-stream) the error the client
//! reads names no worker, while the gateway's log line names it.

use crate::support::{self, Proc, MODEL};

use axum::body::Bytes;
use axum::routing::post;
use serde_json::json;

/// What the gateway logs when it renders a failure: before the response started, and after.
const FAILURE_LOGS: [&str; 2] = ["request failed", "response failed after it started"];

async fn chat(gw: &Proc, stream: bool) -> (u16, String) {
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 20, "stream": stream});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

/// The client's error hides `worker`'s address; a failure line of the gateway's log shows it.
async fn expect_address_only_in_the_log(gw: &Proc, worker: &str, body: &str, what: &str) {
    let address = worker.trim_start_matches("http://");
    assert!(body.contains("\"error\""), "{what}: no error in {body}");
    assert!(
        !body.contains(address),
        "{what}: the client read the worker's address: {body}"
    );
    support::eventually(&format!("{what}: a failure logged with {address}"), || {
        let logged = gw
            .logs()
            .lines()
            .any(|l| l.contains(address) && FAILURE_LOGS.iter().any(|f| l.contains(f)));
        async move { logged }
    })
    .await;
}

#[tokio::test]
async fn a_refused_connection_names_no_worker() {
    let mut sim = support::sim(&[]).await;
    // No health check after the first: the gateway still routes to the worker once it is gone.
    let gw = support::gateway(&[&sim], &["--health-check-interval-secs", "600"]).await;
    sim.kill();
    let (status, body) = chat(&gw, false).await;
    assert_eq!(status, 502, "{body}");
    expect_address_only_in_the_log(&gw, &sim.url, &body, "connection refused").await;
}

#[tokio::test]
async fn a_workers_500_names_no_worker() {
    let worker = support::fake_worker(axum::Router::new().route(
        "/generate",
        post(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
    ))
    .await;
    let gw = support::gateway(&[], &["--worker-urls", &worker]).await;
    support::ready(&gw).await;
    let (status, body) = chat(&gw, false).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("boom"),
        "the worker's own message is kept: {body}"
    );
    expect_address_only_in_the_log(&gw, &worker, &body, "HTTP 500").await;
}

#[tokio::test]
async fn a_truncated_answer_names_no_worker() {
    // Headers, half a JSON body, then the connection is cut.
    let worker = support::fake_worker(axum::Router::new().route(
        "/generate",
        post(|| async {
            let parts: [Result<Bytes, std::io::Error>; 2] = [
                Ok(Bytes::from_static(b"{\"text\": \"hel")),
                Err(std::io::Error::other("cut")),
            ];
            axum::body::Body::from_stream(futures_util::stream::iter(parts))
        }),
    ))
    .await;
    let gw = support::gateway(&[], &["--worker-urls", &worker]).await;
    support::ready(&gw).await;
    let body = json!({"text": "hi", "sampling_params": {"max_new_tokens": 4}});
    let r = support::post(format!("{}/generate", gw.url), &body).await;
    let status = r.status().as_u16();
    let body = r.text().await.expect("body");
    assert_eq!(status, 502, "{body}");
    expect_address_only_in_the_log(&gw, &worker, &body, "truncated answer").await;
}

#[tokio::test]
async fn a_death_mid_stream_names_no_worker() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    support::set_faults(&sim, json!({"die_after_tokens": 3})).await;
    let (status, body) = chat(&gw, true).await;
    assert_eq!(status, 200, "the stream started: {body}");
    assert!(!body.contains("[DONE]"), "{body}");
    expect_address_only_in_the_log(&gw, &sim.url, &body, "death mid-stream").await;
}
