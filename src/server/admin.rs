//! Admin routes: the worker registry at run time (`GET/POST /workers`, `DELETE /workers/{id}`).
//! A worker joins one model's workers: the one its `model` names, else the one it reports
//! serving on `/v1/models` (gRPC: `GetModelInfo`). With one model it joins that one at once.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::AppState;
use crate::error::GatewayError;
use crate::models::Served;
use crate::workers::{RegistryError, Worker, WorkerId};

/// How long adding a worker waits for it to say which model it serves.
const MODEL_QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn describe(w: &Worker, model: &str) -> serde_json::Value {
    json!({
        "id": w.id.0,
        "model": model,
        "url": w.url(),
        "healthy": w.is_healthy(),
        "available": w.is_available(),
        "breaker": w.breaker.state().name(),
        "excluded_because": w.excluded_because(),
        "in_flight": w.in_flight(),
        "pending_prefill_tokens": w.pending_prefill(),
        "engine_load": w.engine_load(),
        "engine_load_sources": w.load_sources(),
    })
}

pub async fn list(State(app): State<Arc<AppState>>) -> Response {
    let workers: Vec<_> = app
        .models
        .iter()
        .flat_map(|s| {
            let snapshot = s.router().registry().snapshot();
            snapshot
                .iter()
                .map(|w| describe(w, &s.model.name))
                .collect::<Vec<_>>()
        })
        .collect();
    axum::Json(json!({ "workers": workers })).into_response()
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
