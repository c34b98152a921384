//! The routes that are not inference: models, info, liveness, readiness, metrics, and the admin
//! routes' keys.

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};

use super::{gateway, get, send, NO_WORKER, NO_WORKER_CODE};
use crate::support::{self, MODEL};

#[tokio::test]
async fn models_and_info_routes() {
    let app = gateway(&[]);
    let v = send(&app, get("/v1/models")).await.json();
    assert_eq!(v["data"][0]["id"], MODEL);
    for path in [
        "/server_info",
        "/get_server_info",
        "/model_info",
        "/get_model_info",
        "/health",
    ] {
        assert_eq!(send(&app, get(path)).await.status, 200, "{path}");
    }
    let v = send(&app, get("/server_info")).await.json();
    assert_eq!(v["policy"], "prefix_cost");
    // Workers by id: their addresses are for the admin route only.
    assert_eq!(v["workers"][0]["id"], 0);
    assert!(
        !v.to_string().contains(NO_WORKER),
        "a worker address leaked: {v}"
    );
}

/// Not ready until a worker passed a health check: none is configured, or none was checked
/// (no health check runs in process).
#[tokio::test]
async fn readiness_is_503_without_healthy_workers() {
    let no_workers = super::build(Vec::<String>::new());
    for app in [no_workers, gateway(&[])] {
        let r = send(&app, get("/readiness")).await;
        assert_eq!(r.status, 503);
        assert_eq!(r.json()["healthy_workers"], 0);
        let body = json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}]});
        let r = send(
            &app,
            super::post(
                "/v1/chat/completions",
                Some("application/json"),
                body.to_string(),
            ),
        )
        .await;
        assert_eq!(r.status, 503);
        assert_eq!(r.json()["error"]["code"], NO_WORKER_CODE);
    }
}

#[tokio::test]
async fn metrics_are_exported_per_worker() {
    let app = gateway(&[]);
    let r = send(&app, get("/metrics")).await;
    assert_eq!(r.status, 200);
    let text = String::from_utf8_lossy(&r.body);
    let healthy = format!("switchboard_worker_healthy{{worker=\"{NO_WORKER}\"}}");
    assert_eq!(support::metric(&text, &healthy), Some(0.0), "{text}");
    assert!(support::metric(&text, "switchboard_tokenizer_cache_bytes").is_some_and(|b| b > 0.0));
}

fn workers(key: Option<&str>) -> Request<Body> {
    let mut req = Request::get("/workers");
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    req.body(Body::empty()).expect("request")
}

#[tokio::test]
async fn admin_routes_need_the_admin_key() {
    let app = gateway(&["--api-key", "infer", "--admin-api-key", "admin"]);
    assert_eq!(send(&app, workers(None)).await.status, 401);
    assert_eq!(
        send(&app, workers(Some("infer"))).await.status,
        403,
        "the inference key must not open admin routes"
    );
    let r = send(&app, workers(Some("admin"))).await;
    assert_eq!(r.status, 200);
    let v: Value = r.json();
    assert_eq!(v["workers"][0]["url"], NO_WORKER);
    // And the admin key is not an inference key.
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2});
    let req = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("authorization", "Bearer admin")
        .body(Body::from(body.to_string()))
        .expect("request");
    assert_eq!(send(&app, req).await.status, 401);
}
