//! Bad and hostile input on `/v1/messages` (here) and `/v1/responses` (`responses_input`): each refused with its exact
//! status in its API's own error shape (Anthropic's `{"type":"error","error":{"type","message"}}`,
//! OpenAI's `{"error":{"message","type","param","code"}}`), never a 5xx; the gateway serves on.

use serde_json::{json, Value};

use super::{gateway, post, send};
use crate::hostile_input::cases::check_answer;
use crate::support::MODEL;

pub(super) const MESSAGES: &str = "/v1/messages";
pub(super) const RESPONSES: &str = "/v1/responses";
pub(super) const JSON: &str = "application/json";

/// Checks Anthropic's error shape and returns `error.type`.
fn anthropic_error(status: u16, expect: u16, body: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    if status != expect {
        return Err(format!("status {status}, expected {expect}: {text}"));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON ({e}): {text}"))?;
    let kind = v["error"]["type"].as_str().unwrap_or_default();
    let message = v["error"]["message"].as_str().unwrap_or_default();
    let keys: Vec<&String> = v
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    if v["type"] != "error" || kind.is_empty() || message.is_empty() || keys.len() != 2 {
        return Err(format!("not Anthropic's error shape: {v}"));
    }
    Ok(kind.to_owned())
}

/// Sends each case and collects what went wrong with it.
pub(super) async fn run(
    app: &axum::Router,
    path: &str,
    cases: Vec<(&str, Vec<u8>, u16)>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, body, status) in cases {
        let answer = send(app, post(path, Some(JSON), body)).await;
        let problem = if path == MESSAGES {
            anthropic_error(answer.status, status, &answer.body).err()
        } else {
            check_answer(status, answer.status, &answer.body)
        };
        if let Some(p) = problem {
            problems.push(format!("{path} {name}: {p}"));
        }
    }
    problems
}

pub(super) fn bytes(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

pub(super) fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test]
async fn bad_messages_get_anthropic_errors_never_a_5xx() {
    let app = gateway(&["--context-length", "4096"]);
    let user = json!([{"role": "user", "content": "hi"}]);
    let with = |extra: Value| {
        let mut v = json!({"model": MODEL, "max_tokens": 8, "messages": user});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        bytes(v)
    };
    let cases = vec![
        (
            "missing max_tokens",
            bytes(json!({"model": MODEL, "messages": user})),
            400,
        ),
        (
            "missing model",
            bytes(json!({"max_tokens": 8, "messages": user})),
            400,
        ),
        ("max_tokens a string", with(json!({"max_tokens": "8"})), 400),
        ("max_tokens a float", with(json!({"max_tokens": 1.5})), 400),
        ("max_tokens zero", with(json!({"max_tokens": 0})), 400),
        ("max_tokens negative", with(json!({"max_tokens": -1})), 400),
        (
            "max_tokens over the context",
            with(json!({"max_tokens": 1u64 << 40})),
            400,
        ),
        ("messages a string", with(json!({"messages": "hi"})), 400),
        ("messages empty", with(json!({"messages": []})), 400),
        (
            "role system",
            with(json!({"messages": [{"role": "system", "content": "x"}]})),
            400,
        ),
        (
            "content a number",
            with(json!({"messages": [{"role": "user", "content": 3}]})),
            400,
        ),
        (
            "an image block",
            with(json!({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]})),
            400,
        ),
        (
            "tool_use input a string",
            with(json!({"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]})),
            400,
        ),
        (
            "tool_result content a number",
            with(json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": 7}]}]})),
            400,
        ),
        ("system a number", with(json!({"system": 1})), 400),
        ("temperature over 1", with(json!({"temperature": 1.5})), 400),
        ("top_k zero", with(json!({"top_k": 0})), 400),
        (
            "stop_sequences a string",
            with(json!({"stop_sequences": "END"})),
            400,
        ),
        (
            "seventeen stop_sequences",
            with(json!({"stop_sequences": vec!["x"; 17]})),
            400,
        ),
        (
            "an empty stop sequence",
            with(json!({"stop_sequences": [""]})),
            400,
        ),
        (
            "tools without a parser",
            with(json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}]})),
            400,
        ),
        (
            "a server tool",
            with(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
            400,
        ),
        (
            "tool_choice unknown",
            with(json!({"tool_choice": {"type": "sometimes"}})),
            400,
        ),
        (
            "thinking budget too small",
            with(json!({"max_tokens": 4000, "thinking": {"type": "enabled", "budget_tokens": 10}})),
            400,
        ),
        (
            "thinking without a budget",
            with(json!({"thinking": {"type": "enabled"}})),
            400,
        ),
        ("metadata a string", with(json!({"metadata": "u"})), 400),
        ("an unknown field", with(json!({"frobnicate": true})), 400),
        ("mcp_servers", with(json!({"mcp_servers": []})), 400),
        ("stream a string", with(json!({"stream": "yes"})), 400),
        (
            "unknown model",
            with(json!({"model": "no-such-model"})),
            404,
        ),
        ("not JSON", b"{\"model\": ".to_vec(), 400),
        ("invalid UTF-8", b"{\"model\": \"\xff\xfe\"}".to_vec(), 400),
        ("NaN", b"{\"model\": NaN}".to_vec(), 400),
        (
            "deeply nested",
            format!(
                r#"{{"model":"{MODEL}","max_tokens":8,"messages":{}}}"#,
                nested(5000)
            )
            .into_bytes(),
            400,
        ),
        (
            "two objects",
            [with(json!({})), with(json!({}))].concat(),
            400,
        ),
    ];
    let problems = run(&app, MESSAGES, cases).await;
    assert!(problems.is_empty(), "{problems:#?}");
    // A valid request passes every check: no worker answers here, Anthropic's overloaded 529.
    let answer = send(&app, post(MESSAGES, Some(JSON), with(json!({})))).await;
    assert_eq!(
        anthropic_error(answer.status, 529, &answer.body),
        Ok("overloaded_error".into())
    );
    super::assert_still_serving(&app).await;
}

#[tokio::test]
async fn messages_errors_from_outside_the_handler_are_anthropic_shaped_too() {
    let app = gateway(&[
        "--api-key",
        "k",
        "--max-body-bytes",
        "2000",
        "--tool-call-parser",
        "qwen25",
    ]);
    let body = bytes(
        json!({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
    );
    let keyed = |body: Vec<u8>, ct: &str| {
        let mut req = post(MESSAGES, Some(ct), body);
        req.headers_mut().insert("x-api-key", "k".parse().unwrap());
        req
    };
    let cases: Vec<(&str, axum::http::Request<axum::body::Body>, u16, &str)> = vec![
        (
            "no key",
            post(MESSAGES, Some(JSON), body.clone()),
            401,
            "authentication_error",
        ),
        (
            "a wrong key",
            {
                let mut r = post(MESSAGES, Some(JSON), body.clone());
                r.headers_mut().insert("x-api-key", "nope".parse().unwrap());
                r
            },
            401,
            "authentication_error",
        ),
        (
            "an oversized body",
            keyed(vec![b' '; 4000], JSON),
            413,
            "request_too_large",
        ),
        (
            "not JSON content",
            keyed(body.clone(), "text/plain"),
            415,
            "invalid_request_error",
        ),
        (
            "tool_choice any",
            keyed(
                bytes(
                    json!({"model": MODEL, "max_tokens": 8, "tool_choice": {"type": "any"},
            "messages": [{"role": "user", "content": "hi"}]}),
                ),
                JSON,
            ),
            400,
            "invalid_request_error",
        ),
        // The key is right: Bearer works as well as x-api-key.
        (
            "bearer",
            {
                let mut r = post(MESSAGES, Some(JSON), body.clone());
                r.headers_mut()
                    .insert("authorization", "Bearer k".parse().unwrap());
                r
            },
            529,
            "overloaded_error",
        ),
        (
            "x-api-key",
            keyed(body.clone(), JSON),
            529,
            "overloaded_error",
        ),
    ];
    for (name, req, status, kind) in cases {
        let answer = send(&app, req).await;
        assert_eq!(
            anthropic_error(answer.status, status, &answer.body),
            Ok(kind.to_owned()),
            "{name}"
        );
    }
    // Other routes keep OpenAI's shape.
    let answer = send(&app, post("/v1/chat/completions", Some(JSON), body)).await;
    assert_eq!(check_answer(401, answer.status, &answer.body), None);
}
