//! Connections to a worker (`upstream::pool`): one request after another goes out on the same
//! keep-alive connection, and a connection the worker closed while it sat idle is never used
//! again (no request fails on it). The worker here is a few lines of HTTP/1.1 on a raw socket,
//! so the test sees every connection and decides when each one closes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{self, MODEL};

#[tokio::test]
async fn requests_one_after_another_share_one_connection() {
    let (url, accepted) = raw_worker(None).await;
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
    // The worker closes every connection 20 ms after its answer, as a keep-alive timeout does.
    let (url, accepted) = raw_worker(Some(Duration::from_millis(20))).await;
    let gw = support::gateway(&[], &["--worker-urls", url.as_str()]).await;
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

async fn chat(gw: &str) -> u16 {
    let body = json!({"model": MODEL, "max_tokens": 1,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = support::post(format!("{gw}/v1/chat/completions"), &body).await;
    r.status().as_u16()
}

/// A worker answering `/generate` with one finished token and `/health` with `ok` (anything
/// else 404), keeping each connection open for more requests, or closing it `close_after` its
/// first answer. Returns its URL and the count of connections it accepted.
async fn raw_worker(close_after: Option<Duration>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(sock, close_after));
        }
    });
    (url, accepted)
}

async fn serve(mut sock: TcpStream, close_after: Option<Duration>) {
    let mut buf = Vec::new();
    while let Some(path) = read_request(&mut sock, &mut buf).await {
        let (status, body) = match path.as_str() {
            "/generate" => {
                let chunk = json!({"text": "Hi", "output_ids": [11],
                    "meta_info": {"prompt_tokens": 5, "completion_tokens": 1,
                                  "finish_reason": {"type": "length", "length": 1}}});
                ("200 OK", format!("data: {chunk}\n\ndata: [DONE]\n\n"))
            }
            "/health" => ("200 OK", "ok".to_owned()),
            _ => ("404 Not Found", String::new()),
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if sock.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        if let Some(wait) = close_after {
            tokio::time::sleep(wait).await;
            return;
        }
    }
}

/// Reads one request (head and `content-length` body) from `sock`, leaving what follows it in
/// `buf`; returns its path, or `None` once the peer closed.
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
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
    buf.drain(..head_end + length);
    Some(path)
}
