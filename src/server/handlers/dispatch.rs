//! One inference request after parsing: route → upstream → relay. Errors before the response
//! starts are counted and rendered here; after that the relay owns them.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};

use crate::config::BackendKind;
use crate::error::GatewayError;
use crate::metrics::{Endpoint, RequestTimer, Stage};
use crate::prepare::Prepared;
use crate::relay::format::{Formatter, Kind};
use crate::relay::generation::{leg, Spec};
use crate::relay::passthrough::{self, Forward};
use crate::relay::reliability::Deadlines;
use crate::relay::{collect, stream, Generation};
use crate::routing::{self, Pick, RouteRequest};
use crate::server::{request_id, AppState};
use crate::upstream::abort::AbortOnDrop;
use crate::workers::{LoadGuard, Worker, WorkerId};

pub struct Request<'a> {
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    pub prepared: Prepared,
    pub kind: Kind,
    pub start: Instant,
}

/// Runs a handler body; an error it returns is counted under `endpoint` and rendered.
pub async fn respond<F>(app: &AppState, endpoint: Endpoint, fut: F) -> Response
where
    F: Future<Output = Result<Response, GatewayError>>,
{
    match fut.await {
        Ok(resp) => resp,
        Err(e) => {
            app.metrics.request_done(endpoint, e.status().as_u16());
            e.into_response()
        }
    }
}

pub fn pick(
    app: &AppState,
    req: &RouteRequest<'_>,
    exclude: &[WorkerId],
) -> Result<(Arc<Worker>, Pick), GatewayError> {
    let t = Instant::now();
    let workers = app.registry.snapshot();
    let picked = routing::select(app.policy.as_ref(), req, &workers, exclude)?;
    app.metrics.pick(&picked.0.url);
    app.metrics.stage(Stage::Route, t.elapsed().as_secs_f64());
    Ok(picked)
}

/// The session a request belongs to, for session-affine routing: SMG's `X-SMG-Routing-Key`,
/// then `X-Session-ID`, then the body's `user`.
pub fn session_key<'a>(headers: &'a HeaderMap, user: Option<&'a str>) -> Option<&'a str> {
    ["x-smg-routing-key", "x-session-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .or(user)
        .filter(|k| !k.is_empty())
}

/// Chat and completions: native `/generate` with our token ids, or the worker's own route.
pub async fn openai(app: &Arc<AppState>, req: Request<'_>) -> Result<Response, GatewayError> {
    let rid = request_id::from_headers(req.headers);
    let endpoint = if req.kind == Kind::Chat {
        Endpoint::Chat
    } else {
        Endpoint::Completions
    };
    let p = req.prepared;
    let session = session_key(req.headers, p.user.as_deref()).map(str::to_owned);
    if p.forward || app.config.backend == BackendKind::Openai {
        let path = if req.kind == Kind::Chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        // SGLang workers can abort by rid; OpenAI-compatible ones stop when the connection closes.
        let abortable = app.config.backend == BackendKind::Sglang;
        let body = if abortable {
            with_rid(&req.body, &rid)
        } else {
            req.body
        };
        let spec = ForwardSpec {
            path,
            body,
            prompt_ids: &p.prompt_ids,
            session_key: session.as_deref(),
            rid: &rid,
            abortable,
            endpoint,
            start: req.start,
        };
        return forward(app, spec).await;
    }
    let spec = Spec {
        rid: rid.clone(),
        prompt: p.prompt_ids,
        params: p.params,
        session_key: session,
        endpoint,
        timer: RequestTimer::start_at(req.start),
    };
    let generation = Generation::start(app, spec).await?;
    let format = Formatter::new(req.kind, &rid, Arc::clone(&app.model));
    let resp = if p.stream {
        stream::respond(generation, format, p.include_usage)
    } else {
        collect::respond(generation, format).await
    };
    Ok(with_request_id(resp, &rid))
}

pub struct ForwardSpec<'a> {
    pub path: &'static str,
    pub body: Bytes,
    pub prompt_ids: &'a [u32],
    pub session_key: Option<&'a str>,
    pub rid: &'a str,
    /// The worker understands `/abort_request` for this rid.
    pub abortable: bool,
    pub endpoint: Endpoint,
    pub start: Instant,
}

/// A body forwarded as it is, retried on another worker while the worker provably did not
/// start it (connect error, 503/429 before any body).
pub async fn forward(app: &Arc<AppState>, spec: ForwardSpec<'_>) -> Result<Response, GatewayError> {
    let mut tried = Vec::new();
    let mut attempt = 0;
    loop {
        let route = RouteRequest {
            prompt_ids: spec.prompt_ids,
            session_key: spec.session_key,
        };
        let (worker, pick) = pick(app, &route, &tried)?;
        tried.push(worker.id);
        let uncached = spec.prompt_ids.len().saturating_sub(pick.predicted_cached) as u64;
        let result = passthrough::forward(Forward {
            client: app.client.clone(),
            guard: LoadGuard::book(Arc::clone(&worker), uncached)
                .with_prediction(pick.predicted_cached),
            abort: spec
                .abortable
                .then(|| AbortOnDrop::new(app.client.clone(), worker, spec.rid.to_owned())),
            path: spec.path,
            body: spec.body.clone(),
            endpoint: spec.endpoint,
            metrics: Arc::clone(&app.metrics),
            timer: RequestTimer::start_at(spec.start),
            deadlines: Deadlines::new(
                spec.start,
                &app.config.reliability,
                app.config.request_timeout_secs,
            ),
        })
        .await;
        match result {
            Ok(resp) => return Ok(with_request_id(resp, spec.rid)),
            Err(GatewayError::Upstream(e))
                if leg::retryable(&e) && attempt < app.config.reliability.max_retries =>
            {
                attempt += 1;
                app.metrics.retries.inc();
                tracing::info!(rid = spec.rid, error = %e, attempt, "retrying on another worker");
            }
            Err(e) => return Err(e),
        }
    }
}

/// Adds `rid` to a JSON object body (so the worker's request can be aborted by it), unless the
/// client set one.
pub fn with_rid(body: &Bytes, rid: &str) -> Bytes {
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body) {
        Ok(mut map) => {
            map.entry("rid")
                .or_insert_with(|| serde_json::Value::from(rid));
            serde_json::to_vec(&map)
                .map(Bytes::from)
                .unwrap_or_else(|_| body.clone())
        }
        Err(_) => body.clone(),
    }
}

pub fn with_request_id(mut resp: Response, rid: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}
