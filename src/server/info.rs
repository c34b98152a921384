//! Non-inference routes: models, liveness, readiness, metrics, server and model info.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{fleet_state, AppState};
use crate::error::GatewayError;
use crate::metrics::WorkerSample;
use crate::protocol::openai::{ModelCard, ModelList};

fn json_response<T: serde::Serialize>(status: StatusCode, body: &T) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(body).unwrap_or_default(),
    )
        .into_response()
}

pub async fn models(State(app): State<Arc<AppState>>) -> Response {
    let data: Vec<ModelCard<'_>> = app
        .models
        .iter()
        .map(|s| ModelCard {
            id: &s.model.name,
            object: "model",
            created: 0,
            owned_by: "switchboard",
            root: &s.model.name,
            parent: None,
            max_model_len: s.model.context_length,
        })
        .collect();
    let list = ModelList {
        object: "list",
        data,
    };
    json_response(StatusCode::OK, &list)
}

/// Liveness: the process answers.
pub async fn health() -> StatusCode {
    StatusCode::OK
}

/// Readiness: at least one worker passed its health check.
pub async fn readiness(State(app): State<Arc<AppState>>) -> Response {
    let (mut healthy, mut total) = (0, 0);
    for served in app.models.iter() {
        let workers = served.router().registry().snapshot();
        total += workers.len();
        // PD: a request needs a worker of each role.
        let prefill_ok = served
            .relay
            .prefill
            .as_ref()
            .is_none_or(|p| p.any_healthy());
        if prefill_ok {
            healthy += workers.iter().filter(|w| w.is_healthy()).count();
        }
    }
    let draining = *app.draining.borrow();
    let status = if healthy > 0 && !draining {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(
        status,
        &json!({ "status": if draining { "draining" } else if healthy > 0 { "ready" } else { "not ready" }, "healthy_workers": healthy, "total_workers": total }),
    )
}

pub async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let fleets: Vec<_> = app.models.iter().map(|s| (s, model_gauges(s))).collect();
    let samples: Vec<WorkerSample> = fleets
        .iter()
        .flat_map(|(served, workers)| {
            workers.iter().map(|w| WorkerSample {
                model: &served.model.name,
                url: w.url(),
                in_flight: w.in_flight(),
                healthy: w.is_healthy(),
                breaker_open: w.breaker().state() == crate::workers::breaker::BreakerState::Open,
                breaker_transitions: w.breaker().transitions(),
            })
        })
        .collect();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(&samples),
    )
        .into_response()
}

/// Sets a model's gauges from the live counters at scrape time (not kept on the hot path)
/// and returns its workers, the prefill pool's too (PD), for their per-worker series.
fn model_gauges(served: &crate::models::Served) -> Vec<Arc<crate::workers::Worker>> {
    let metrics = served.metrics();
    if let Some(tokens) = served.router().index_tokens() {
        metrics.prefix_index_tokens.set(tokens as i64);
    }
    metrics
        .tokenizer_cache_bytes
        .set(served.model.tokenizer.cached_bytes() as i64);
    let prefill = served
        .relay
        .prefill
        .as_ref()
        .map(|p| p.router().registry().snapshot());
    let decode = served.router().registry().snapshot();
    decode
        .iter()
        .chain(prefill.iter().flat_map(|p| p.iter()))
        .cloned()
        .collect()
}

/// How long `/server_info` waits for a worker's own `/server_info` and `/metrics`.
const WORKER_INFO_TIMEOUT: Duration = Duration::from_secs(2);

/// Open to any client, so workers appear by id only: their addresses are for the admin route
/// (`GET /workers`) and the logs, never for clients. `internal_states[0]` is the fleet's
/// (`fleet_state::aggregate`); each worker's own list is under `workers[].internal_states`.
pub async fn server_info(State(app): State<Arc<AppState>>) -> Response {
    let c = &app.config;
    let snapshot: Vec<_> = app
        .models
        .iter()
        .flat_map(|s| {
            let workers = s.router().registry().snapshot();
            let name = Arc::clone(&s.model.name);
            workers
                .iter()
                .map(|w| (Arc::clone(&name), Arc::clone(w)))
                .collect::<Vec<_>>()
        })
        .collect();
    let healthy: Vec<_> = snapshot
        .iter()
        .filter(|(_, w)| w.is_healthy())
        .map(|(_, w)| Arc::clone(w))
        .collect();
    let states = fleet_state::fetch(&app.client, &healthy, WORKER_INFO_TIMEOUT).await;
    let workers: Vec<_> = snapshot
        .iter()
        .map(|(model, w)| {
            let mut entry = json!({"id": w.id.0, "model": &**model, "healthy": w.is_healthy(), "in_flight": w.in_flight()});
            if let (Some(s), Some(map)) = (
                states.iter().find(|s| s.id == w.id.0),
                entry.as_object_mut(),
            ) {
                map.insert("internal_states".into(), s.internal_states.clone().into());
            }
            entry
        })
        .collect();
    // The first model is the one a client that reads a single `model_path` sees.
    let model = &app.models.default_model().model;
    let mut info = json!({
        "model_path": &*model.name, "served_model_name": &*model.name, "context_length": model.context_length,
        "policy": c.routing.policy.name(), "backend": format!("{:?}", c.backend), "workers": workers,
        "version": env!("CARGO_PKG_VERSION"), "frontend": "switchboard",
        "internal_states": [fleet_state::aggregate(&states)],
    });
    if let (true, Some(map)) = (app.models.len() > 1, info.as_object_mut()) {
        let names: Vec<&str> = app.models.iter().map(|s| &*s.model.name).collect();
        map.insert("served_models".into(), json!(names));
    }
    json_response(StatusCode::OK, &info)
}

#[derive(serde::Deserialize)]
pub struct ModelQuery {
    model: Option<String>,
}

/// SGLang's `/model_info`; with several models, `?model=NAME` picks one (default: the first).
pub async fn model_info(
    State(app): State<Arc<AppState>>,
    axum::extract::Query(query): axum::extract::Query<ModelQuery>,
) -> Response {
    let served = match query.model.as_deref() {
        None => app.models.default_model(),
        Some(name) => match app.models.find(name) {
            Ok(served) => served,
            Err(e) => return e.into_response(),
        },
    };
    let model = &served.model;
    json_response(
        StatusCode::OK,
        &json!({"model_path": &*model.name, "served_model_name": &*model.name, "tokenizer_path": &*model.name, "is_generation": true, "max_context_length": model.context_length}),
    )
}

pub async fn not_found() -> Response {
    GatewayError::NotFound.into_response()
}
