//! Bad requests get an OpenAI-style 4xx (`{"error":{"message","type","param","code"}}`), never a
//! panic, and the gateway keeps serving afterwards. One test per case.

use crate::support;

use crate::support::{Proc, MODEL};
use serde_json::{json, Value};

async fn setup(extra: &[&str]) -> (Proc, Proc) {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], extra).await;
    (sim, gw)
}

/// Sends raw bytes, asserts the status and the error shape, then that the gateway still works.
async fn expect_error(
    gw: &Proc,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
    status: u16,
) -> Value {
    let c = support::client();
    let resp = c
        .post(format!("{}{path}", gw.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), status, "status");
    let v: Value = resp.json().await.expect("error body is JSON");
    let err = v
        .get("error")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("no error object in {v}"));
    for key in ["message", "type", "param", "code"] {
        assert!(err.contains_key(key), "missing `{key}` in {v}");
    }
    assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()));
    // Still healthy and serving.
    let ok = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(
            &json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2}),
        )
        .send()
        .await
        .expect("follow-up");
    assert_eq!(ok.status().as_u16(), 200);
    v
}

async fn chat_error(body: Value, status: u16) -> Value {
    let (_sim, gw) = setup(&[]).await;
    expect_error(
        &gw,
        "/v1/chat/completions",
        "application/json",
        body.to_string().into_bytes(),
        status,
    )
    .await
}

#[tokio::test]
async fn malformed_json() {
    let (_sim, gw) = setup(&[]).await;
    let v = expect_error(
        &gw,
        "/v1/chat/completions",
        "application/json",
        b"{\"model\": ".to_vec(),
        400,
    )
    .await;
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn wrong_types() {
    let v = chat_error(
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": "ten"}),
        400,
    )
    .await;
    assert_eq!(v["error"]["param"], "max_tokens");
    let v = chat_error(json!({"model": MODEL, "messages": "hello"}), 400).await;
    assert_eq!(v["error"]["param"], "messages");
}

#[tokio::test]
async fn empty_messages() {
    let v = chat_error(json!({"model": MODEL, "messages": []}), 400).await;
    assert_eq!(v["error"]["param"], "messages");
}

#[tokio::test]
async fn missing_messages() {
    chat_error(json!({"model": MODEL}), 400).await;
}

#[tokio::test]
async fn message_without_role() {
    let v = chat_error(
        json!({"model": MODEL, "messages": [{"content": "hi"}]}),
        400,
    )
    .await;
    assert_eq!(v["error"]["param"], "messages[0]");
}

#[tokio::test]
async fn unknown_model() {
    let v = chat_error(
        json!({"model": "no-such-model", "messages": [{"role":"user","content":"hi"}]}),
        404,
    )
    .await;
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_eq!(v["error"]["param"], "model");
}

#[tokio::test]
async fn prompt_longer_than_context() {
    let (_sim, gw) = setup(&["--context-length", "64"]).await;
    let long = "word ".repeat(200);
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content": long}], "max_tokens": 4});
    let v = expect_error(
        &gw,
        "/v1/chat/completions",
        "application/json",
        body.to_string().into_bytes(),
        400,
    )
    .await;
    assert_eq!(v["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn negative_max_tokens() {
    let v = chat_error(
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": -5}),
        400,
    )
    .await;
    assert_eq!(v["error"]["param"], "max_tokens");
}

#[tokio::test]
async fn absurd_max_tokens() {
    let v = chat_error(json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 1_000_000_000_000u64}), 400).await;
    assert_eq!(v["error"]["param"], "max_tokens");
}

#[tokio::test]
async fn out_of_range_temperature() {
    let v = chat_error(
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "temperature": 9.5}),
        400,
    )
    .await;
    assert_eq!(v["error"]["param"], "temperature");
}

#[tokio::test]
async fn body_over_size_limit() {
    let (_sim, gw) = setup(&["--max-body-bytes", "1024"]).await;
    let big = json!({"model": MODEL, "messages": [{"role":"user","content": "x".repeat(4096)}]});
    let v = expect_error(
        &gw,
        "/v1/chat/completions",
        "application/json",
        big.to_string().into_bytes(),
        413,
    )
    .await;
    assert_eq!(v["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn invalid_utf8() {
    let (_sim, gw) = setup(&[]).await;
    let mut body =
        br#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"bad "#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    body.extend_from_slice(br#""}]}"#);
    expect_error(&gw, "/v1/chat/completions", "application/json", body, 400).await;
}

#[tokio::test]
async fn wrong_content_type() {
    let (_sim, gw) = setup(&[]).await;
    let body = json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}]})
        .to_string()
        .into_bytes();
    expect_error(&gw, "/v1/chat/completions", "text/plain", body, 415).await;
}

#[tokio::test]
async fn completions_prompt_token_outside_vocab() {
    let (_sim, gw) = setup(&[]).await;
    let body = json!({"model": MODEL, "prompt": [1, 2, 999_999_999], "max_tokens": 2})
        .to_string()
        .into_bytes();
    let v = expect_error(&gw, "/v1/completions", "application/json", body, 400).await;
    assert_eq!(v["error"]["param"], "prompt");
}

#[tokio::test]
async fn unknown_route_is_openai_404() {
    let (_sim, gw) = setup(&[]).await;
    expect_error(&gw, "/v1/nope", "application/json", b"{}".to_vec(), 404).await;
}

#[tokio::test]
async fn api_key_required_when_configured() {
    let (_sim, gw) = setup(&["--api-key", "sekret"]).await;
    let c = support::client();
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2});
    let r = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let r = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .bearer_auth("wrong")
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    let r = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .bearer_auth("sekret")
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
}
