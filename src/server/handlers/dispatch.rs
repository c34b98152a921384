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
use crate::relay::passthrough::{self, Forward};
use crate::relay::{collect, stream, Generation};
use crate::routing::{self, Pick, RouteRequest};
use crate::server::{request_id, AppState};
use crate::upstream::abort::AbortOnDrop;
use crate::upstream::generate;
use crate::workers::{LoadGuard, Worker};

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

pub fn pick(app: &AppState, req: &RouteRequest<'_>) -> Result<(Arc<Worker>, Pick), GatewayError> {
    let t = Instant::now();
    let workers = app.registry.snapshot();
    let picked = routing::select(app.policy.as_ref(), req, &workers)?;
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
    let route = RouteRequest {
        prompt_ids: &p.prompt_ids,
        session_key: session_key(req.headers, p.user.as_deref()),
    };
    let (worker, pick) = pick(app, &route)?;
    let span = tracing::debug_span!("request", id = %rid, worker = %worker.url);
    let _enter = span.enter();
    let guard = LoadGuard::book(
        Arc::clone(&worker),
        p.prompt_ids.len().saturating_sub(pick.predicted_cached) as u64,
    )
    .with_prediction(pick.predicted_cached);
    let timer = RequestTimer::start_at(req.start);
    if p.forward || app.config.backend == BackendKind::Openai {
        let path = if req.kind == Kind::Chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        // SGLang workers can abort by rid; OpenAI-compatible ones stop when the connection closes.
        let abort = (app.config.backend == BackendKind::Sglang)
            .then(|| AbortOnDrop::new(app.client.clone(), Arc::clone(&worker), rid.clone()));
        let body = if abort.is_some() {
            with_rid(&req.body, &rid)
        } else {
            req.body
        };
        let resp = passthrough::forward(Forward {
            client: app.client.clone(),
            guard,
            abort,
            path,
            body,
            endpoint,
            metrics: Arc::clone(&app.metrics),
            timer,
        })
        .await?;
        return Ok(with_request_id(resp, &rid));
    }
    let mut abort = AbortOnDrop::new(app.client.clone(), Arc::clone(&worker), rid.clone());
    let upstream = match generate::start(
        &app.client,
        worker,
        Arc::clone(&app.tokenizer),
        &p.prompt_ids,
        &p.params,
        &rid,
    )
    .await
    {
        Ok(u) => u,
        Err(e) => {
            // The worker refused or was unreachable: it is not generating.
            abort.disarm();
            guard.outcome(e.is_worker_fault());
            app.metrics.upstream_error(e.metric_label());
            return Err(e.into());
        }
    };
    app.metrics
        .stage(Stage::UpstreamHeaders, req.start.elapsed().as_secs_f64());
    let generation = Generation::new(
        upstream,
        guard,
        abort,
        timer,
        Arc::clone(&app.metrics),
        endpoint,
    );
    let format = Formatter::new(req.kind, &rid, Arc::clone(&app.model));
    let resp = if p.stream {
        stream::respond(generation, format, p.include_usage)
    } else {
        collect::respond(generation, format).await
    };
    Ok(with_request_id(resp, &rid))
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
