//! Hostile input that needs a running gateway (+ one simulated worker): the corpus cases a
//! worker answers (`hostile_input/cases.rs`; the gateway's own refusals are checked in process),
//! malformed HTTP sent over raw TCP, and a 100 MB body. Every case must get its exact status,
//! 4xx answers in the OpenAI error shape, never a 5xx or a hang; the gateway must still serve
//! afterwards.

mod big_bodies;
pub mod cases;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{self, Proc};

/// No case may take longer than this (a hang is a failure, not a stuck test run).
const CASE_TIMEOUT: Duration = Duration::from_secs(20);

pub(crate) async fn setup() -> (Proc, Proc) {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    (sim, gw)
}

/// The gateway still answers a normal request and `/health`.
pub(crate) async fn assert_still_serving(gw: &Proc) {
    let c = support::client();
    let health = c
        .get(format!("{}/health", gw.url))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);
    let body = json!({"model": cases::MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2});
    let r = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&body)
        .send()
        .await
        .expect("normal request");
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn corpus_cases_the_worker_answers() {
    let (_sim, gw) = setup().await;
    let client = reqwest::Client::builder()
        .timeout(CASE_TIMEOUT)
        .build()
        .expect("client");
    let cases: Vec<_> = cases::all()
        .into_iter()
        .filter(|c| c.worker_answers)
        .collect();
    assert!(cases.len() >= 20, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let mut req = client
            .post(format!("{}{}", gw.url, case.path))
            .body(case.body);
        if let Some(ct) = case.content_type {
            req = req.header("content-type", ct);
        }
        let problem = match req.send().await {
            Err(e) => Some(format!("no answer: {e}")),
            Ok(resp) => {
                let status = resp.status().as_u16();
                match resp.bytes().await {
                    Ok(body) => cases::check_answer(case.expect, status, &body),
                    Err(e) => Some(format!("status {status}, body unreadable: {e}")),
                }
            }
        };
        if let Some(p) = problem {
            failures.push(format!("{}: {p}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_still_serving(&gw).await;
}

/// Sends raw bytes on a fresh connection; returns the status and the response head.
pub(crate) fn raw_exchange(port: u16, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(CASE_TIMEOUT)).expect("timeout");
    // Written from another thread while this one reads: the server may answer (and close)
    // before it has read everything, and then write errors are expected.
    let mut w = s.try_clone().expect("clone");
    let request = request.to_vec();
    let writer = std::thread::spawn(move || {
        for chunk in request.chunks(64 * 1024) {
            if w.write_all(chunk).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && !out.is_empty() => break,
            Err(e) => panic!(
                "no complete answer ({e}); got {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    // Unblocks a writer stuck on a server that stopped reading.
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_owned();
    (status, head)
}

fn chat_request(extra_headers: &[u8]) -> Vec<u8> {
    let body = json!({"model": cases::MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2})
        .to_string();
    let mut r = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\ncontent-type: application/json\r\n".to_vec();
    r.extend_from_slice(extra_headers);
    r.extend_from_slice(format!("content-length: {}\r\n\r\n{body}", body.len()).as_bytes());
    r
}

/// The echoed `x-request-id`, from a response head.
fn request_id(head: &str) -> Option<&str> {
    head.lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .map(str::trim)
}

#[tokio::test]
async fn malformed_http_and_header_injection() {
    let (_sim, gw) = setup().await;
    let port = gw.port;
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("x_request_id_with_bare_cr", chat_request(b"x-request-id: abc\rinjected: 1\r\n"), 400),
        ("x_request_id_with_nul", chat_request(b"x-request-id: abc\0def\r\n"), 400),
        ("x_request_id_obs_text", chat_request(b"x-request-id: \xff\xfe\x80abc\r\n"), 200),
        ("x_request_id_crlf_smuggled_header", chat_request(b"x-request-id: a\r\nset-cookie: pwned=1\r\n"), 200),
        ("x_request_id_64k", chat_request(format!("x-request-id: {}\r\n", "a".repeat(64 * 1024)).as_bytes()), 200),
        ("header_line_1mb", chat_request(format!("x-big: {}\r\n", "a".repeat(1 << 20)).as_bytes()), 431),
        ("two_hundred_headers", chat_request((0..200).map(|i| format!("x-h{i}: v\r\n")).collect::<String>().as_bytes()), 431),
        ("header_without_colon", chat_request(b"this is not a header\r\n"), 400),
        ("content_length_not_a_number", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: abc\r\n\r\n{}".to_vec(), 400),
        ("two_content_lengths", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}".to_vec(), 400),
        ("bad_chunk_size", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".to_vec(), 400),
    ];
    let mut failures = Vec::new();
    for (name, request, expect) in cases {
        let (status, head) = tokio::task::spawn_blocking(move || raw_exchange(port, &request))
            .await
            .expect("raw exchange");
        if status != expect {
            failures.push(format!("{name}: status {status}, expected {expect}"));
        } else if head.to_ascii_lowercase().contains("set-cookie") || head.contains("injected") {
            failures.push(format!("{name}: a smuggled header came back: {head}"));
        } else if status == 200 {
            // An unusable client id is replaced by a fresh one, never echoed.
            let id = request_id(&head).unwrap_or("");
            if id.is_empty()
                || id.len() > 128
                || !id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
            {
                failures.push(format!("{name}: missing or unsafe x-request-id: {id:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_still_serving(&gw).await;
}

/// Peak and current resident memory of a process, in KiB (Linux).
pub(crate) fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// A 100 MB body, streamed in 64 KiB chunks, with and without a declared length: refused with
/// a 413 in seconds, and the gateway never holds anything like the whole body in memory.
#[tokio::test]
async fn hundred_megabyte_body_is_refused_without_buffering_it() {
    const TOTAL: usize = 100 * 1024 * 1024;
    let (_sim, gw) = setup().await;
    let (port, pid) = (gw.port, gw.pid());
    let (_, baseline) = memory_kib(pid);
    for declared in [true, false] {
        let started = Instant::now();
        let (status, _) = tokio::task::spawn_blocking(move || {
            let mut head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\ncontent-type: application/json\r\n".to_vec();
            let mut body = Vec::with_capacity(TOTAL + 64);
            body.extend_from_slice(b"{\"model\":\"");
            body.resize(TOTAL, b'a');
            if declared {
                head.extend_from_slice(format!("content-length: {TOTAL}\r\n\r\n").as_bytes());
                head.extend_from_slice(&body);
            } else {
                head.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                for chunk in body.chunks(64 * 1024) {
                    head.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    head.extend_from_slice(chunk);
                    head.extend_from_slice(b"\r\n");
                }
                head.extend_from_slice(b"0\r\n\r\n");
            }
            raw_exchange(port, &head)
        })
        .await
        .expect("upload");
        let took = started.elapsed();
        eprintln!("100 MB body, declared length {declared}: {status} after {took:?}");
        assert_eq!(status, 413, "declared length: {declared}");
        assert!(took < Duration::from_secs(15), "413 took {took:?}");
    }
    let (peak, _) = memory_kib(pid);
    let grew_mib = peak.saturating_sub(baseline) / 1024;
    eprintln!(
        "gateway peak memory grew by {grew_mib} MiB over {} MiB",
        baseline / 1024
    );
    // The limit is 32 MiB: reading up to it is expected, holding 100 MB is not.
    assert!(grew_mib < 80, "gateway memory grew by {grew_mib} MiB");
    let health = support::client()
        .get(format!("{}/health", gw.url))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);
}
