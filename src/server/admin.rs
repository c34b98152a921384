//! Admin routes: the worker registry at run time (`GET/POST /workers`, `DELETE /workers/{id}`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use crate::error::GatewayError;
use crate::workers::load_report::LoadSources;
use crate::workers::{EngineLoad, RegistryError, Worker, WorkerId};

/// One worker as `GET /workers` shows it: typed, so a list of thousands is written straight
/// out rather than built as JSON values first.
#[derive(Serialize)]
struct WorkerView<'a> {
    id: u32,
    url: &'a str,
    healthy: bool,
    available: bool,
    breaker: &'static str,
    excluded_because: Option<&'static str>,
    in_flight: usize,
    pending_prefill_tokens: u64,
    engine_load: EngineLoad,
    engine_load_sources: LoadSources,
    /// A data-parallel worker's rank units: what routing sees of each rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    dp_ranks: Option<Vec<RankView>>,
}

#[derive(Serialize)]
struct RankView {
    id: u32,
    rank: Option<u32>,
    rank_field: Option<&'static str>,
    in_flight: usize,
    pending_prefill_tokens: u64,
    engine_load: EngineLoad,
    engine_load_sources: LoadSources,
}

fn describe(w: &Worker) -> WorkerView<'_> {
    WorkerView {
        id: w.id.0,
        url: w.url(),
        healthy: w.is_healthy(),
        available: w.is_available(),
        breaker: w.breaker.state().name(),
        excluded_because: w.excluded_because(),
        in_flight: w.in_flight(),
        pending_prefill_tokens: w.pending_prefill(),
        engine_load: w.engine_load(),
        engine_load_sources: w.load_sources(),
        dp_ranks: None,
    }
}

#[derive(Serialize)]
struct WorkerList<'a> {
    workers: Vec<WorkerView<'a>>,
}

/// A data-parallel worker's rank unit.
fn describe_rank(u: &Worker) -> RankView {
    RankView {
        id: u.id.0,
        rank: u.dp_rank().map(|r| r.rank),
        rank_field: u.dp_rank().map(|r| r.field),
        in_flight: u.in_flight(),
        pending_prefill_tokens: u.pending_prefill(),
        engine_load: u.engine_load(),
        engine_load_sources: u.load_sources(),
    }
}

pub async fn list(State(app): State<Arc<AppState>>) -> Response {
    let registry = app.router.registry();
    let snapshot = registry.snapshot();
    let workers = snapshot
        .iter()
        .map(|w| WorkerView {
            dp_ranks: registry
                .units_of(w.id)
                .map(|units| units.iter().map(|u| describe_rank(u)).collect()),
            ..describe(w)
        })
        .collect();
    axum::Json(WorkerList { workers }).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddWorker {
    url: String,
}

/// Adds a worker; it takes traffic once its first health check passes (checked at once).
pub async fn add(State(app): State<Arc<AppState>>, body: Bytes) -> Response {
    let req: AddWorker = match super::body::parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    match app.router.add_worker(&req.url) {
        Ok(worker) => (StatusCode::CREATED, axum::Json(describe(&worker))).into_response(),
        Err(RegistryError::Duplicate(url)) => (
            StatusCode::CONFLICT,
            axum::Json(
                GatewayError::invalid_body(
                    format!("worker {url} is already registered"),
                    Some("url".into()),
                )
                .body(),
            ),
        )
            .into_response(),
        Err(RegistryError::InvalidUrl(msg)) => {
            GatewayError::invalid_body(msg, Some("url".into())).into_response()
        }
    }
}

/// Removes a worker: no new requests go to it; those in flight finish.
pub async fn remove(State(app): State<Arc<AppState>>, Path(id): Path<u32>) -> Response {
    match app.router.remove_worker(WorkerId(id)) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => GatewayError::NotFound.into_response(),
    }
}
