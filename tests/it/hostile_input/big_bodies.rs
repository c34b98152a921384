//! 30 MiB bodies that would each cost the gateway gigabytes if parsed naively: token ids for
//! `/generate` and completions, a one-letter-word chat message, a content list of numbers. With
//! the body limit raised far above them, each must still be refused fast by the bounds behind it
//! (JSON items counted before parsing, prompt text measured before tokenizing), while the
//! gateway's peak memory stays far below what parsing them would take.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{assert_still_serving, memory_kib, raw_exchange};
use crate::support::{self, MODEL};

const BODY: usize = 30 << 20;
/// What the issue allows the gateway's peak to grow by over all four bodies.
const GROWTH_LIMIT_MIB: u64 = 160;

/// `{<head><item><sep><item>…<tail>}` of about [`BODY`] bytes.
fn body(head: &str, item: &str, sep: &str, tail: &str) -> Vec<u8> {
    let n = (BODY - head.len() - tail.len()) / (item.len() + sep.len());
    let mut out = Vec::with_capacity(BODY + item.len());
    out.extend_from_slice(head.as_bytes());
    for i in 0..n {
        if i > 0 {
            out.extend_from_slice(sep.as_bytes());
        }
        out.extend_from_slice(item.as_bytes());
    }
    out.extend_from_slice(tail.as_bytes());
    out
}

#[tokio::test]
async fn thirty_mebibyte_prompts_are_refused_before_they_are_parsed_or_tokenized() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &["--max-body-bytes", &(64u32 << 20).to_string()]).await;
    let pid = gw.pid();
    let (_, before) = memory_kib(pid);
    let cases = [
        ("/generate", body(r#"{"input_ids":["#, "1", ",", "]}"), 413),
        (
            "/v1/completions",
            body(
                &format!(r#"{{"model":"{MODEL}","prompt":["#),
                "1",
                ",",
                "]}",
            ),
            413,
        ),
        (
            "/v1/chat/completions",
            body(
                &format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":""#),
                "a",
                " ",
                r#""}]}"#,
            ),
            400,
        ),
        (
            "/v1/chat/completions",
            body(
                &format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":["#),
                "1",
                ",",
                "]}]}",
            ),
            413,
        ),
    ];
    let client = support::client();
    for (path, body, want) in cases {
        let started = Instant::now();
        let resp = client
            .post(format!("{}{path}", gw.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("an answer");
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.expect("a JSON error");
        let took = started.elapsed();
        let (peak, _) = memory_kib(pid);
        eprintln!(
            "{path}: {status} after {took:?}, peak {} MiB: {}",
            peak / 1024,
            v["error"]["message"]
        );
        assert_eq!(status, want, "{path}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        // A hang guard, not a speed target (the note reports the figures).
        assert!(took < Duration::from_secs(20), "{path} took {took:?}");
    }
    let (peak, _) = memory_kib(pid);
    let grew_mib = peak.saturating_sub(before) / 1024;
    eprintln!(
        "gateway peak grew by {grew_mib} MiB over {} MiB",
        before / 1024
    );
    assert!(
        grew_mib < GROWTH_LIMIT_MIB,
        "gateway peak memory grew by {grew_mib} MiB"
    );
    assert_still_serving(&gw).await;
}

/// Without `--max-body-bytes`, the limit follows the context (1 MiB + 64 bytes per token): a
/// 30 MiB body is refused from its declared length.
#[tokio::test]
async fn the_default_body_limit_follows_the_context_length() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let mut request = format!(
        "POST /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\ncontent-type: application/json\r\ncontent-length: {BODY}\r\n\r\n"
    )
    .into_bytes();
    let mut ids = body(r#"{"input_ids":["#, "1", ",", "]}");
    ids.resize(BODY, b' '); // exactly the declared length (JSON allows trailing whitespace)
    request.extend(ids);
    let port = gw.port;
    // Raw TCP: the gateway answers from the declared length and may close before reading the
    // body, which an HTTP client library reports as a send error instead of the answer.
    let (status, _) = tokio::task::spawn_blocking(move || raw_exchange(port, &request))
        .await
        .expect("exchange");
    assert_eq!(status, 413);
    assert_still_serving(&gw).await;
}
