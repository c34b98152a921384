//! Who a request is: empty keys never open a route (defect 10), and the rate limit is keyed by
//! the client's address, not by a Bearer token nothing validates (defect 6).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use serde_json::json;
use switchboard::config::ServeConfig;
use switchboard::net::ClientAddr;

use super::{gateway, post, send, NO_WORKER, NO_WORKER_CODE};
use crate::support::MODEL;

const CHAT: &str = "/v1/chat/completions";

fn chat(token: Option<&str>, from: &str) -> Request<Body> {
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2});
    let mut req = post(CHAT, Some("application/json"), body.to_string());
    if let Some(t) = token {
        let value = format!("Bearer {t}").parse().expect("header value");
        req.headers_mut().insert("authorization", value);
    }
    let addr: SocketAddr = from.parse().expect("address");
    req.extensions_mut().insert(ConnectInfo(ClientAddr(addr)));
    req
}

/// The answer's `error.code`: `NO_WORKER_CODE` when the request got past admission.
async fn code(app: &axum::Router, req: Request<Body>) -> String {
    let v = send(app, req).await.json();
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_fresh_token_per_request_does_not_buy_a_fresh_bucket() {
    let app = gateway(&["--rate-limit-per-key", "0.01", "--rate-limit-burst", "1"]);
    assert_eq!(
        code(&app, chat(Some("t-1"), "10.0.0.1:1000")).await,
        NO_WORKER_CODE
    );
    for token in [Some("t-2"), Some("t-3"), None] {
        assert_eq!(
            code(&app, chat(token, "10.0.0.1:1001")).await,
            "rate_limit_exceeded",
            "{token:?}"
        );
    }
    // Another client has its own bucket.
    assert_eq!(
        code(&app, chat(Some("t-1"), "10.0.0.2:1000")).await,
        NO_WORKER_CODE
    );
}

#[tokio::test]
async fn with_an_api_key_each_client_has_its_own_bucket() {
    let app = gateway(&[
        "--api-key",
        "sekret",
        "--rate-limit-per-key",
        "0.01",
        "--rate-limit-burst",
        "1",
    ]);
    for from in ["10.0.0.1:1", "10.0.0.2:1", "[2001:db8::1]:1"] {
        assert_eq!(code(&app, chat(Some("sekret"), from)).await, NO_WORKER_CODE);
    }
    assert_eq!(
        code(&app, chat(Some("sekret"), "10.0.0.1:2")).await,
        "rate_limit_exceeded"
    );
}

/// `ServeConfig::from_args` refuses empty keys; a config built some other way must still not
/// turn an empty key into an open door.
#[tokio::test]
async fn an_empty_key_opens_nothing() {
    let mut config = ServeConfig::from_args(["--worker-urls", NO_WORKER]).expect("config");
    config.host = "0.0.0.0".into();
    config.api_key = Some(String::new());
    config.admin_api_key = Some(String::new());
    let state = switchboard::gateway::build_state(config).expect("gateway state");
    let app = switchboard::server::router(Arc::new(state));
    for token in [None, Some("")] {
        assert_eq!(
            code(&app, chat(token, "10.0.0.1:1")).await,
            "invalid_api_key"
        );
        let mut workers = Request::get("/workers");
        if let Some(t) = token {
            workers = workers.header("authorization", format!("Bearer {t}"));
        }
        let r = send(&app, workers.body(Body::empty()).expect("request")).await;
        assert!(matches!(r.status, 401 | 403), "/workers: {}", r.status);
    }
}

#[test]
fn empty_keys_are_refused_at_startup() {
    for flag in ["--api-key", "--admin-api-key"] {
        let e = ServeConfig::from_args(["--worker-urls", NO_WORKER, flag, ""])
            .expect_err("an empty key must be refused");
        assert!(e.to_string().contains(flag), "{e}");
    }
}
