//! Non-inference routes: models, liveness, readiness, metrics, server and model info.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{fleet_state, AppState};
use crate::error::GatewayError;
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
    let list = ModelList {
        object: "list",
        data: [ModelCard {
            id: &app.model.name,
            object: "model",
            created: 0,
            owned_by: "switchboard",
            root: &app.model.name,
            parent: None,
            max_model_len: app.model.context_length,
        }],
    };
    json_response(StatusCode::OK, &list)
}

/// Liveness: the process answers.
pub async fn health() -> StatusCode {
    StatusCode::OK
}

/// Readiness: at least one worker passed its health check.
pub async fn readiness(State(app): State<Arc<AppState>>) -> Response {
    let workers = app.router.registry().snapshot();
    let healthy = workers.iter().filter(|w| w.is_healthy()).count();
    let draining = *app.draining.borrow();
    // PD: a request needs a worker of each role.
    let prefill_ok = app.relay.prefill.as_ref().is_none_or(|p| p.any_healthy());
    let healthy = if prefill_ok { healthy } else { 0 };
    let status = if healthy > 0 && !draining {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(
        status,
        &json!({ "status": if draining { "draining" } else if healthy > 0 { "ready" } else { "not ready" }, "healthy_workers": healthy, "total_workers": workers.len() }),
    )
}

pub async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    if let Some(tokens) = app.router.index_tokens() {
        app.metrics.prefix_index_tokens.set(tokens as i64);
    }
    app.metrics
        .tokenizer_cache_bytes
        .set(app.model.tokenizer.cached_bytes() as i64);
    // Per-worker gauges are read from the live counters at scrape time, not kept on the hot path.
    // PD: the prefill pool's workers too.
    let prefill = app
        .relay
        .prefill
        .as_ref()
        .map(|p| p.router().registry().snapshot());
    let decode = app.router.registry().snapshot();
    for w in decode.iter().chain(prefill.iter().flat_map(|p| p.iter())) {
        app.metrics
            .worker_in_flight
            .with_label_values(&[w.url()])
            .set(w.in_flight() as i64);
        app.metrics
            .worker_healthy
            .with_label_values(&[w.url()])
            .set(i64::from(w.is_healthy()));
        let open = w.breaker.state() == crate::workers::breaker::BreakerState::Open;
        app.metrics
            .worker_breaker_open
            .with_label_values(&[w.url()])
            .set(i64::from(open));
        let transitions = app
            .metrics
            .breaker_transitions
            .with_label_values(&[w.url()]);
        transitions.inc_by(w.breaker.transitions().saturating_sub(transitions.get()));
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

/// How long `/server_info` waits for a worker's own `/server_info` and `/metrics`.
const WORKER_INFO_TIMEOUT: Duration = Duration::from_secs(2);

/// Open to any client, so workers appear by id only: their addresses are for the admin route
/// (`GET /workers`) and the logs, never for clients. `internal_states[0]` is the fleet's
/// (`fleet_state::aggregate`); each worker's own list is under `workers[].internal_states`.
pub async fn server_info(State(app): State<Arc<AppState>>) -> Response {
    let c = &app.config;
    let snapshot = app.router.registry().snapshot();
    let healthy: Vec<_> = snapshot
        .iter()
        .filter(|w| w.is_healthy())
        .cloned()
        .collect();
    let states = fleet_state::fetch(&app.relay.client, &healthy, WORKER_INFO_TIMEOUT).await;
    let workers: Vec<_> = snapshot
        .iter()
        .map(|w| {
            let mut entry =
                json!({"id": w.id.0, "healthy": w.is_healthy(), "in_flight": w.in_flight()});
            if let (Some(s), Some(map)) = (
                states.iter().find(|s| s.id == w.id.0),
                entry.as_object_mut(),
            ) {
                map.insert("internal_states".into(), s.internal_states.clone().into());
            }
            entry
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "model_path": &*app.model.name, "served_model_name": &*app.model.name, "context_length": app.model.context_length,
            "policy": c.routing.policy.name(), "backend": format!("{:?}", c.backend), "workers": workers,
            "version": env!("CARGO_PKG_VERSION"), "frontend": "switchboard",
            "internal_states": [fleet_state::aggregate(&states)],
        }),
    )
}

pub async fn model_info(State(app): State<Arc<AppState>>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"model_path": &*app.model.name, "served_model_name": &*app.model.name, "tokenizer_path": &*app.model.name, "is_generation": true, "max_context_length": app.model.context_length}),
    )
}

pub async fn not_found() -> Response {
    GatewayError::NotFound.into_response()
}
