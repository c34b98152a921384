//! Every path retries through one loop: after a worker refuses (503 before any byte), the next
//! worker is tried only after a backoff, on the forwarding path as on the token-id path.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::post;

use crate::support;

type Arrivals = Arc<Mutex<Vec<Instant>>>;

/// A healthy worker that refuses every generation with 503, noting when each one arrived.
async fn refusing_worker(arrivals: Arrivals) -> String {
    let refuse = move || {
        let arrivals = Arc::clone(&arrivals);
        async move {
            arrivals.lock().expect("arrivals").push(Instant::now());
            (
                StatusCode::SERVICE_UNAVAILABLE,
                r#"{"error":{"message":"The request queue is full."}}"#,
            )
        }
    };
    support::fake_worker(axum::Router::new().route("/generate", post(refuse))).await
}

/// A gateway in front of two refusing workers, and when their generations arrived.
async fn refused_everywhere(max_retries: u32, backoff_ms: u64) -> (support::Proc, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let a = refusing_worker(Arc::clone(&arrivals)).await;
    let b = refusing_worker(Arc::clone(&arrivals)).await;
    let (retries, backoff) = (max_retries.to_string(), backoff_ms.to_string());
    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &a,
            &b,
            "--max-retries",
            &retries,
            "--retry-backoff-ms",
            &backoff,
            "--load-poll-interval-ms",
            "0",
        ],
    )
    .await;
    support::ready(&gw).await;
    (gw, arrivals)
}

#[tokio::test]
async fn a_retry_waits_a_backoff_on_every_path() {
    let backoff = Duration::from_millis(300);
    let (gw, arrivals) = refused_everywhere(1, backoff.as_millis() as u64).await;
    let passthrough =
        serde_json::json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}});
    let token_ids = serde_json::json!({"model": support::MODEL, "max_tokens": 4,
                                       "messages": [{"role": "user", "content": "hi"}]});
    for (path, body) in [
        ("/generate", passthrough),
        ("/v1/chat/completions", token_ids),
    ] {
        arrivals.lock().expect("arrivals").clear();
        let r = support::post(format!("{}{path}", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 503, "{path}: both workers refused");
        let seen = arrivals.lock().expect("arrivals").clone();
        assert_eq!(
            seen.len(),
            2,
            "{path}: one attempt, one retry on the other worker"
        );
        // The first retry waits between the base backoff and twice that.
        let gap = seen[1] - seen[0];
        assert!(
            gap >= backoff,
            "{path}: the retry came {gap:?} after the first attempt, before the backoff"
        );
    }
}

#[tokio::test]
async fn when_every_worker_refused_the_client_gets_the_workers_answer() {
    // More retries allowed than there are workers: the last pick finds no one left to try.
    let (gw, arrivals) = refused_everywhere(3, 1).await;
    let body =
        serde_json::json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}});
    let r = support::post(format!("{}/generate", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 503);
    let v: serde_json::Value = r.json().await.expect("json");
    assert_eq!(arrivals.lock().expect("arrivals").len(), 2);
    assert_ne!(v["error"]["code"], "no_worker_available", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("queue is full")),
        "the workers' own reason: {v}"
    );
}
