//! Admin routes: the worker registry at run time (`GET/POST /workers`, `DELETE /workers/{id}`).
//! A worker joins one model's workers: the one its `model` names, else the one it reports
//! serving on `/v1/models` (gRPC: `GetModelInfo`). With one model it joins that one at once.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use crate::error::GatewayError;
use crate::models::Served;
use crate::workers::load_report::LoadSources;
use crate::workers::{EngineLoad, RegistryError, Worker, WorkerId};

/// How long adding a worker waits for it to say which model it serves.
const MODEL_QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One worker as `GET /workers` shows it: typed, so a list of thousands is written straight
/// out rather than built as JSON values first.
#[derive(Serialize)]
struct WorkerView<'a> {
    id: u32,
    model: &'a str,
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

fn describe<'a>(w: &'a Worker, model: &'a str) -> WorkerView<'a> {
    WorkerView {
        id: w.id.0,
        model,
        url: w.url(),
        healthy: w.is_healthy(),
        available: w.is_available(),
        breaker: w.breaker().state().name(),
        excluded_because: w.excluded_because(),
        in_flight: w.in_flight(),
        pending_prefill_tokens: w.pending_prefill(),
        engine_load: w.engine_load(),
        engine_load_sources: w.load_sources(),
        dp_ranks: None,
    }
}

/// A data-parallel worker's rank unit.
fn describe_rank(u: &Worker) -> RankView {
    RankView {
        id: u.id.0,
        rank: u.dp_rank().map(|r| r.rank),
        rank_field: u.dp_rank().map(|r| r.field.name()),
        in_flight: u.in_flight(),
        pending_prefill_tokens: u.pending_prefill(),
        engine_load: u.engine_load(),
        engine_load_sources: u.load_sources(),
    }
}

#[derive(Serialize)]
struct WorkerList<'a> {
    workers: Vec<WorkerView<'a>>,
}

pub async fn list(State(app): State<Arc<AppState>>) -> Response {
    let fleets: Vec<_> = app
        .models
        .iter()
        .map(|s| (s, s.router().registry().snapshot()))
        .collect();
    let workers = fleets
        .iter()
        .flat_map(|(s, snapshot)| {
            let registry = s.router().registry();
            snapshot.iter().map(move |w| WorkerView {
                dp_ranks: registry
                    .units_of(w.id)
                    .map(|units| units.iter().map(|u| describe_rank(u)).collect()),
                ..describe(w, &s.model.name)
            })
        })
        .collect();
    axum::Json(WorkerList { workers }).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddWorker {
    url: String,
    /// The model it serves (a name or alias); omitted: asked from the worker.
    model: Option<String>,
}

/// Adds a worker; it takes traffic once its first health check passes (checked at once).
pub async fn add(State(app): State<Arc<AppState>>, body: Bytes) -> Response {
    let req: AddWorker = match super::body::parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let served = match model_of(&app, &req).await {
        Ok(served) => served,
        Err(e) => return e.into_response(),
    };
    match served.router().add_worker(&req.url) {
        Ok(worker) => {
            if app.models.len() == 1 && req.model.is_none() {
                learn_name_later(&app, &served, &req.url);
            }
            let body = describe(&worker, &served.model.name);
            (StatusCode::CREATED, axum::Json(body)).into_response()
        }
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
    let removed = app
        .models
        .worker(WorkerId(id))
        .and_then(|(served, w)| served.router().remove_worker(w.id));
    match removed {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => GatewayError::NotFound.into_response(),
    }
}

/// The model a new worker joins: the one `model` names; with one model, that one; else the
/// one the worker reports serving.
async fn model_of(app: &AppState, req: &AddWorker) -> Result<Arc<Served>, GatewayError> {
    if let Some(name) = &req.model {
        return app.models.find(name).cloned();
    }
    if app.models.len() == 1 {
        return Ok(Arc::clone(app.models.default_model()));
    }
    let unknown = |why: String| {
        GatewayError::invalid_body(
            format!(
                "cannot tell which model {} serves ({why}): give `model`",
                req.url
            ),
            Some("model".into()),
        )
    };
    let ids =
        crate::discovery::reconcile::worker_models(&app.client, &req.url, MODEL_QUERY_TIMEOUT)
            .await
            .map_err(unknown)?;
    app.models.for_worker(&ids).cloned().ok_or_else(|| {
        let ours: Vec<&str> = app.models.iter().map(|s| &*s.model.name).collect();
        unknown(format!("it serves {ids:?}, none of {ours:?}"))
    })
}

/// One model whose name is still open (no `--served-model-name`, no worker answered at
/// start-up): the worker is asked in the background, and the id it reports is accepted.
fn learn_name_later(app: &AppState, served: &Arc<Served>, url: &str) {
    if served
        .model
        .late_name
        .as_ref()
        .is_none_or(|n| n.get().is_some())
    {
        return;
    }
    let (client, served, url) = (app.client.clone(), Arc::clone(served), url.to_owned());
    tokio::spawn(async move {
        match crate::discovery::reconcile::worker_models(&client, &url, MODEL_QUERY_TIMEOUT).await {
            Ok(ids) => served.model.learn_name(&ids),
            Err(why) => {
                tracing::info!(%url, %why, "the new worker did not say which model it serves")
            }
        }
    });
}
