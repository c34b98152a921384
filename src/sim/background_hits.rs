//! How often the simulator was asked the questions a gateway asks in the background (health,
//! loads, metrics, info): `GET /sim/background` lists the counts per path, so tests can check
//! what a gateway costs each worker when nothing is being served.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};

/// The paths counted: every GET a router or gateway sends a worker without a client request.
const PATHS: [&str; 10] = [
    "/health",
    "/health_generate",
    "/ready",
    "/v1/loads",
    "/get_load",
    "/metrics",
    "/server_info",
    "/get_server_info",
    "/model_info",
    "/v1/models",
];

#[derive(Default)]
struct Hits([AtomicU64; PATHS.len()]);

/// `router` plus the counting middleware and the route that reports the counts.
pub fn counted(router: Router) -> Router {
    let hits = Arc::new(Hits::default());
    router
        .route("/sim/background", get(list).with_state(Arc::clone(&hits)))
        .layer(middleware::from_fn_with_state(hits, count))
}

async fn count(State(hits): State<Arc<Hits>>, req: Request, next: Next) -> Response {
    if let Some(i) = PATHS.iter().position(|p| *p == req.uri().path()) {
        hits.0[i].fetch_add(1, Ordering::Relaxed);
    }
    next.run(req).await
}

async fn list(State(hits): State<Arc<Hits>>) -> Json<serde_json::Map<String, serde_json::Value>> {
    let mut counts = serde_json::Map::new();
    for (path, n) in PATHS.iter().zip(hits.0.iter()) {
        counts.insert((*path).to_owned(), n.load(Ordering::Relaxed).into());
    }
    Json(counts)
}
