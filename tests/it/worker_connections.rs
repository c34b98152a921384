//! Connections to a worker (`upstream::pool`): one request after another goes out on the same
//! keep-alive connection, a connection the worker closed while it sat idle is never used again
//! (no request fails on it), and the connection of an answer nobody reads (an abort's) is kept.
//! The worker here is a few lines of HTTP/1.1 on a raw socket, so the test sees every
//! connection and what went out on it, and decides when each one closes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{self, MODEL};

#[tokio::test]
async fn requests_one_after_another_share_one_connection() {
    let (url, seen) = raw_worker(None, false).await;
    let accepted = &seen.accepted;
    let gw = support::gateway(&[], &["--worker-urls", url.as_str()]).await;
    support::ready(&gw).await;
    let before = accepted.load(Ordering::SeqCst);
    for i in 0..20 {
        assert_eq!(chat(&gw.url).await, 200, "request {i}");
    }
    // The health checks may open one more beside a request in flight, never one per request.
    let opened = accepted.load(Ordering::SeqCst) - before;
    assert!(opened <= 2, "20 requests opened {opened} connections");
}

#[tokio::test]
async fn a_connection_the_worker_closed_while_idle_is_not_used_again() {
    // The worker closes a connection idle for 20 ms, as a keep-alive timeout does. No health
    // checks or load polls after the first: a poll's connection, still open when a request
    // follows it closely, would rightly carry that request.
    let (url, seen) = raw_worker(Some(Duration::from_millis(20)), false).await;
    let accepted = &seen.accepted;
    let args = [
        "--worker-urls",
        url.as_str(),
        "--load-poll-interval-ms",
        "0",
        "--health-check-interval-secs",
        "3600",
    ];
    let gw = support::gateway(&[], &args).await;
    support::ready(&gw).await;
    let before = accepted.load(Ordering::SeqCst);
    for i in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(chat(&gw.url).await, 200, "request {i}");
    }
    let opened = accepted.load(Ordering::SeqCst) - before;
    assert!(
        opened >= 10,
        "10 requests over closed connections opened {opened}"
    );
}

#[tokio::test]
async fn the_connection_of_an_abort_nobody_reads_is_kept() {
    // The first generation never answers: its client leaves, and the gateway aborts it.
    let (url, seen) = raw_worker(None, true).await;
    let gw = support::gateway(&[], &["--worker-urls", url.as_str()]).await;
    support::ready(&gw).await;
    let body = json!({"model": MODEL, "max_tokens": 1, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let left = support::client()
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&body)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(left.is_err(), "the stalled generation answered");
    support::eventually("the abort reached the worker", || async {
        seen.paths().iter().flatten().any(|p| p == "/abort_request")
    })
    .await;
    // Its answer (200, empty) is dropped unread; its connection carries a later request.
    support::eventually("a request on the abort's connection", || async {
        assert_eq!(chat(&gw.url).await, 200);
        seen.paths().iter().any(|c| {
            c.iter()
                .skip_while(|p| *p != "/abort_request")
                .nth(1)
                .is_some()
        })
    })
    .await;
}

async fn chat(gw: &str) -> u16 {
    let body = json!({"model": MODEL, "max_tokens": 1,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = support::post(format!("{gw}/v1/chat/completions"), &body).await;
    r.status().as_u16()
}

/// What the raw worker saw: connections accepted, and the paths requested on each.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    paths: Mutex<Vec<Vec<String>>>,
}

impl Seen {
    fn paths(&self) -> Vec<Vec<String>> {
        self.paths.lock().unwrap().clone()
    }
}

/// A worker answering `/generate` with one finished token (a stream, or one JSON object when
/// asked for `stream: false`), `/health` with `ok` and anything else
/// (`/abort_request`) with an empty 200, keeping each connection open for more requests, or
/// closing it once it has been idle for `close_after`. With `stall_first`, the first
/// `/generate` is never answered. Returns its URL and what it saw.
async fn raw_worker(close_after: Option<Duration>, stall_first: bool) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Seen::default());
    let stall = Arc::new(AtomicBool::new(stall_first));
    let on_accept = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            on_accept.accepted.fetch_add(1, Ordering::SeqCst);
            let conn = {
                let mut paths = on_accept.paths.lock().unwrap();
                paths.push(Vec::new());
                paths.len() - 1
            };
            let (seen, stall) = (Arc::clone(&on_accept), Arc::clone(&stall));
            tokio::spawn(serve(sock, close_after, seen, conn, stall));
        }
    });
    (url, seen)
}

async fn serve(
    mut sock: TcpStream,
    close_after: Option<Duration>,
    seen: Arc<Seen>,
    conn: usize,
    stall: Arc<AtomicBool>,
) {
    let mut buf = Vec::new();
    loop {
        let read = read_request(&mut sock, &mut buf);
        let path = match close_after {
            Some(idle) => tokio::time::timeout(idle, read).await.ok().flatten(),
            None => read.await,
        };
        let Some((path, streamed)) = path else { return };
        seen.paths.lock().unwrap()[conn].push(path.clone());
        let (status, body) = match path.as_str() {
            "/generate" if stall.swap(false, Ordering::SeqCst) => {
                // Held open past the test's end, never answered.
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
            "/generate" => {
                let chunk = json!({"text": "Hi", "output_ids": [11],
                    "meta_info": {"prompt_tokens": 5, "completion_tokens": 1,
                                  "finish_reason": {"type": "length", "length": 1}}});
                if streamed {
                    ("200 OK", format!("data: {chunk}\n\ndata: [DONE]\n\n"))
                } else {
                    ("200 OK", chunk.to_string())
                }
            }
            "/health" => ("200 OK", "ok".to_owned()),
            "/abort_request" => ("200 OK", String::new()),
            _ => ("404 Not Found", String::new()),
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if sock.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads one request (head and `content-length` body) from `sock`, leaving what follows it in
/// `buf`; returns its path and whether it asks for a stream, or `None` once the peer closed.
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, bool)> {
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split_whitespace().nth(1)?.to_owned();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: serde_json::Value =
        serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or_default();
    buf.drain(..head_end + length);
    Some((path, body["stream"] != false))
}
