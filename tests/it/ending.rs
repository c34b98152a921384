//! Every request ends through one exchange, whatever the path: a forwarded answer is under the
//! same deadlines as a generation, a client that leaves before its first token is counted
//! and its worker told, as one that leaves mid-stream, and a client that stops reading cannot
//! keep its worker, load booking or admission slot past the deadlines (or, without any, past the
//! shutdown grace period).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::routing::post;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{self, scripted, MODEL};

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
    support::set_faults(&sim, json!({"stall_secs": 5.0, "stall_after_tokens": 0})).await;
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

/// A worker whose `/generate` streams 8 KiB chunks for ever (delta text and ids).
async fn endless_worker() -> (String, scripted::Seen) {
    let reply: scripted::Reply = Arc::new(|_req: &Value| {
        let chunks = futures_util::stream::iter(1u32..).map(|i| {
            let text = format!("{i:08} {}", "x".repeat(8 * 1024));
            let chunk = json!({"text": text, "output_ids": [i],
                               "meta_info": {"prompt_tokens": 3, "completion_tokens": i}});
            Ok(scripted::event(&chunk))
        });
        Box::pin(chunks)
    });
    scripted::worker(reply).await
}

/// POSTs a streaming `body` to `path` on a raw socket with a small receive buffer, reads the
/// response head and then nothing more; the socket stays open as long as the caller keeps it.
async fn stream_without_reading(
    gw: &support::Proc,
    path: &str,
    body: Value,
) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut conn = socket
        .connect(([127, 0, 0, 1], gw.port).into())
        .await
        .expect("connect");
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut buf = [0u8; 256];
        let n = conn.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed before the response head");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    conn
}

#[tokio::test]
async fn a_client_that_stops_reading_is_ended_by_the_deadline() {
    unread_streams_end_under(&["--request-timeout-secs", "2"]).await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_ended_by_the_idle_limit() {
    unread_streams_end_under(&[
        "--request-timeout-secs",
        "0",
        "--stream-idle-timeout-secs",
        "1",
    ])
    .await;
}

/// Streams whose client reads nothing past the headers, on the token-id and the forwarding
/// path, under the deadline flags `limits`: each worker request is aborted, the load booking
/// and the one admission slot freed, while the sockets stay open.
async fn unread_streams_end_under(limits: &[&str]) {
    let (worker, seen) = endless_worker().await;
    let mut args = vec![
        "--worker-urls",
        &worker,
        "--max-concurrent-requests",
        "1",
        "--queue-size",
        "0",
        "--load-poll-interval-ms",
        "0",
    ];
    args.extend_from_slice(limits);
    let gw = support::gateway(&[], &args).await;
    support::ready(&gw).await;
    let chat = json!({"model": MODEL, "max_tokens": 4000, "stream": true,
                      "messages": [{"role": "user", "content": "never read"}]});
    let generate = json!({"input_ids": [1, 2, 3], "stream": true,
                          "sampling_params": {"max_new_tokens": 4000}});
    let mut open = Vec::new();
    // The token-id path, then the forwarding path (the second is admitted only if the first
    // freed the one slot).
    for (path, body) in [("/v1/chat/completions", chat), ("/generate", generate)] {
        open.push(stream_without_reading(&gw, path, body).await);
        let rid = seen.generate().last().expect("a generation")["rid"]
            .as_str()
            .expect("rid")
            .to_owned();
        support::eventually("the worker told to abort the unread stream", || async {
            seen.aborts().contains(&rid)
        })
        .await;
        support::eventually("gateway in-flight back to 0", || async {
            support::gateway_in_flight(&gw.url).await == 0.0
        })
        .await;
    }
    // The only admission slot is free again, though both sockets are still open.
    let next = support::client()
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&json!({"model": MODEL, "max_tokens": 4, "stream": true,
                      "messages": [{"role": "user", "content": "next"}]}))
        .send()
        .await
        .expect("send");
    assert_eq!(next.status().as_u16(), 200, "the slot was freed");
    drop(next);
    drop(open);
}

/// A batched `/generate` (three prompts) whose client leaves: SGLang knows the prompts as
/// `<rid>_0` … `<rid>_2` and forwards an abort only for an exact live rid, so each gets its own
/// `/abort_request` (the bare rid would reach none of them).
#[tokio::test]
async fn a_batch_whose_client_leaves_is_aborted_prompt_by_prompt() {
    let (worker, seen) = endless_worker().await;
    let gw = support::gateway_env(&[], &["--worker-urls", &worker], &[]).await;
    support::ready(&gw).await;
    let body = json!({"text": ["one", "two", "three"], "stream": true,
                      "sampling_params": {"max_new_tokens": 100000}});
    let conn = stream_without_reading(&gw, "/generate", body).await;
    drop(conn);
    support::eventually("an abort for each prompt of the batch", || {
        let seen = seen.clone();
        async move { seen.aborts().len() >= 3 }
    })
    .await;
    let sent = seen.generate();
    let rids: Vec<String> = sent[0]["rid"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(rids.len(), 3, "{:?}", sent[0]);
    let mut aborted = seen.aborts();
    aborted.sort();
    assert_eq!(aborted, rids);
}

/// A stream whose client reads nothing and which has no deadline of its own (no total or idle
/// limit) is ended once the shutdown grace period is over: its worker is told to abort.
#[tokio::test]
async fn a_client_that_stops_reading_is_ended_after_the_shutdown_grace_period() {
    let (worker, seen) = endless_worker().await;
    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &worker,
            "--request-timeout-secs",
            "0",
            "--stream-idle-timeout-secs",
            "0",
            "--shutdown-grace-period-secs",
            "1",
            "--load-poll-interval-ms",
            "0",
        ],
    )
    .await;
    support::ready(&gw).await;
    let body = json!({"model": MODEL, "max_tokens": 4000, "stream": true,
                      "messages": [{"role": "user", "content": "never read"}]});
    let conn = stream_without_reading(&gw, "/v1/chat/completions", body).await;
    let rid = seen.generate().last().expect("a generation")["rid"]
        .as_str()
        .expect("rid")
        .to_owned();
    // Not ended before the shutdown: it has no limit.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!seen.aborts().contains(&rid), "ended without a limit");
    gw.terminate();
    support::eventually("the worker told to abort the unread stream", || async {
        seen.aborts().contains(&rid)
    })
    .await;
    drop(conn);
}
