//! The W3C `traceparent` headers the simulator received, as SGLang would continue them: tests read
//! them back (`GET /sim/traceparents`, oldest first) to check what a gateway passed on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

/// How many headers are remembered.
const RECENT: usize = 256;

#[derive(Debug, Clone, Serialize)]
struct Seen {
    path: String,
    traceparent: String,
}

#[derive(Default)]
struct Recent(Mutex<VecDeque<Seen>>);

/// `router` plus the recording middleware and the route that lists what it recorded.
pub fn recorded(router: Router) -> Router {
    let recent = Arc::new(Recent::default());
    router
        .route(
            "/sim/traceparents",
            get(list).with_state(Arc::clone(&recent)),
        )
        .layer(middleware::from_fn_with_state(recent, record))
}

async fn record(State(recent): State<Arc<Recent>>, req: Request, next: Next) -> Response {
    if let Some(tp) = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        let seen = Seen {
            path: req.uri().path().to_owned(),
            traceparent: tp.to_owned(),
        };
        let mut q = recent.0.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() == RECENT {
            q.pop_front();
        }
        q.push_back(seen);
    }
    next.run(req).await
}

async fn list(State(recent): State<Arc<Recent>>) -> Json<Vec<Seen>> {
    let q = recent.0.lock().unwrap_or_else(|e| e.into_inner());
    Json(q.iter().cloned().collect())
}
