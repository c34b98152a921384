//! Every request ends through one exchange, whatever the path: a forwarded answer is under the
//! same deadlines as a generation, and a client that leaves before its first token is counted
//! and its worker told, as one that leaves mid-stream.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::{json, Value};

use crate::support::{self, MODEL};

/// A worker that answers `/generate` with headers and then never sends the body.
async fn stalling_worker() -> String {
    let stall = || async {
        let never = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(never))
            .unwrap_or_default()
    };
    support::fake_worker(axum::Router::new().route("/generate", post(stall))).await
}

#[tokio::test]
async fn a_forwarded_answer_that_stalls_after_its_headers_times_out() {
    let worker = stalling_worker().await;
    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &worker,
            "--ttft-timeout-secs",
            "1",
            "--load-poll-interval-ms",
            "0",
        ],
    )
    .await;
    support::ready(&gw).await;
    let t = Instant::now();
    let r = support::post(
        format!("{}/generate", gw.url),
        &json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}}),
    )
    .await;
    assert_eq!(
        r.status().as_u16(),
        504,
        "the time-to-first-token limit applies"
    );
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "answered by the deadline, not by the client giving up"
    );
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "upstream_timeout");
}

#[tokio::test]
async fn a_client_that_leaves_before_its_first_token_is_counted_and_aborted() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let faults = json!({"stall_secs": 5.0, "stall_after_tokens": 0});
    let r = support::post(format!("{}/sim/faults", sim.url), &faults).await;
    assert_eq!(r.status().as_u16(), 200);
    let body = json!({"model": MODEL, "max_tokens": 8, "stream": true,
                      "messages": [{"role": "user", "content": "leaving early"}]});
    // The client gives up while the worker is still before its first token.
    let gone = support::client()
        .post(format!("{}/v1/chat/completions", gw.url))
        .timeout(Duration::from_millis(500))
        .json(&body)
        .send()
        .await;
    assert!(gone.is_err(), "no answer within 0.5 s: {gone:?}");
    support::sim_aborted_and_idle(&sim.url).await;
    support::eventually("the departure counted as a 499", || async {
        let text = support::metrics_text(&gw.url).await;
        let left: f64 = text
            .lines()
            .filter(|l| {
                l.starts_with("switchboard_requests_total{") && l.contains(r#"status="499""#)
            })
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum();
        support::metric_sum(&text, "switchboard_client_aborts_total") >= 1.0 && left >= 1.0
    })
    .await;
}
