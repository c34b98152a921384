//! The in-process tier: the gateway's router driven with `oneshot`, no process and no socket.
//! Its one worker has nothing listening behind it and no health check ever runs, so every answer
//! here comes from the gateway itself: validation, auth, admission of the route, info routes.

mod bad_input;
mod front_doors;
mod handler_sizes;
mod hostile_input;
mod info;
mod keys;
mod responses_input;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::Request;
use serde_json::Value;
use switchboard::config::ServeConfig;
use tower::ServiceExt;

/// A worker address nothing listens on (the discard port): requests never get that far.
pub const NO_WORKER: &str = "http://127.0.0.1:9";

/// What a request that passes every check gets here: routing finds no healthy worker (503).
pub const NO_WORKER_CODE: &str = "no_worker_available";

/// The gateway's router, as `switchboard serve --worker-urls NO_WORKER extra…` would serve it.
pub fn gateway(extra: &[&str]) -> axum::Router {
    let mut args = vec!["--worker-urls", NO_WORKER];
    args.extend_from_slice(extra);
    build(args)
}

/// The gateway's router, as `switchboard serve args…` would serve it.
pub fn build<I: IntoIterator<Item = T>, T: Into<std::ffi::OsString> + Clone>(
    args: I,
) -> axum::Router {
    let config = ServeConfig::from_args(args).expect("config");
    let state = switchboard::gateway::build_state(config).expect("gateway state");
    switchboard::server::router(Arc::new(state))
}

/// A whole response.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}, body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

pub async fn send(app: &axum::Router, req: Request<Body>) -> Answer {
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .expect("the router never fails");
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("response body");
    Answer {
        status: parts.status.as_u16(),
        body,
    }
}

/// A POST of `body` with this content type (none if `None`).
pub fn post(path: &str, content_type: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut req = Request::post(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    req.body(body.into()).expect("request")
}

pub fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).expect("request")
}

/// The gateway still answers `/health`, and a valid request passes every check (as far as
/// routing, which has no healthy worker here).
pub async fn assert_still_serving(app: &axum::Router) {
    assert_eq!(send(app, get("/health")).await.status, 200);
    let body = serde_json::json!({"model": crate::support::MODEL,
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let answer = send(
        app,
        post(
            "/v1/chat/completions",
            Some("application/json"),
            body.to_string(),
        ),
    )
    .await;
    assert_eq!(answer.status, 503);
    assert_eq!(answer.json()["error"]["code"], NO_WORKER_CODE);
}
