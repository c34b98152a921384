//! Bad requests get an OpenAI-style 4xx (`{"error":{"message","type","param","code"}}`), never a
//! panic, and the gateway keeps serving afterwards. One test per case.

use serde_json::{json, Value};

use super::{gateway, post, send};
use crate::hostile_input::cases::check_answer;
use crate::support::MODEL;

const CHAT: &str = "/v1/chat/completions";
const JSON: Option<&str> = Some("application/json");

/// Sends raw bytes, asserts the status and the error shape, then that the gateway still works.
async fn expect_error(
    app: &axum::Router,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
    status: u16,
) -> Value {
    let answer = send(app, post(path, Some(content_type), body)).await;
    if let Some(problem) = check_answer(status, answer.status, &answer.body) {
        panic!("{path}: {problem}");
    }
    super::assert_still_serving(app).await;
    answer.json()
}

async fn chat_error(body: Value, status: u16) -> Value {
    let app = gateway(&[]);
    expect_error(
        &app,
        CHAT,
        "application/json",
        body.to_string().into_bytes(),
        status,
    )
    .await
}

#[tokio::test]
async fn malformed_json() {
    let app = gateway(&[]);
    let v = expect_error(
        &app,
        CHAT,
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
    let app = gateway(&["--context-length", "64"]);
    let long = "word ".repeat(200);
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content": long}], "max_tokens": 4});
    let v = expect_error(
        &app,
        CHAT,
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
    let app = gateway(&["--max-body-bytes", "1024"]);
    let big = json!({"model": MODEL, "messages": [{"role":"user","content": "x".repeat(4096)}]});
    let v = expect_error(
        &app,
        CHAT,
        "application/json",
        big.to_string().into_bytes(),
        413,
    )
    .await;
    assert_eq!(v["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn invalid_utf8() {
    let app = gateway(&[]);
    let mut body =
        br#"{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"bad "#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    body.extend_from_slice(br#""}]}"#);
    expect_error(&app, CHAT, "application/json", body, 400).await;
}

#[tokio::test]
async fn wrong_content_type() {
    let app = gateway(&[]);
    let body = json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}]})
        .to_string()
        .into_bytes();
    expect_error(&app, CHAT, "text/plain", body, 415).await;
}

#[tokio::test]
async fn completions_prompt_token_outside_vocab() {
    let app = gateway(&[]);
    let body = json!({"model": MODEL, "prompt": [1, 2, 999_999_999], "max_tokens": 2})
        .to_string()
        .into_bytes();
    let v = expect_error(&app, "/v1/completions", "application/json", body, 400).await;
    assert_eq!(v["error"]["param"], "prompt");
}

#[tokio::test]
async fn unknown_route_is_openai_404() {
    let app = gateway(&[]);
    expect_error(&app, "/v1/nope", "application/json", b"{}".to_vec(), 404).await;
}

/// With the right key a request gets past the check, as far as routing (here: no worker, 503).
#[tokio::test]
async fn api_key_required_when_configured() {
    let app = gateway(&["--api-key", "sekret"]);
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2})
            .to_string();
    let with_key = |key: Option<&str>| {
        let mut req = post(CHAT, JSON, body.clone());
        if let Some(key) = key {
            let value = format!("Bearer {key}").parse().expect("header value");
            req.headers_mut().insert("authorization", value);
        }
        req
    };
    let r = send(&app, with_key(None)).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    assert_eq!(send(&app, with_key(Some("wrong"))).await.status, 401);
    let r = send(&app, with_key(Some("sekret"))).await;
    assert_eq!(r.json()["error"]["code"], super::NO_WORKER_CODE);
}
