//! `POST /v1/chat/completions` and `POST /v1/completions`: parse, prepare (template +
//! tokenize), then dispatch.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::dispatch::{self, Request};
use crate::error::GatewayError;
use crate::metrics::{Endpoint, Stage};
use crate::model::Model;
use crate::prepare::Prepared;
use crate::protocol::openai::{ChatCompletionRequest, CompletionRequest, WithSampling};
use crate::relay::format::Kind;
use crate::server::body::{off_io_threads_if_large, parse_request, JsonBytes};
use crate::server::request_id::RequestId;
use crate::server::AppState;

pub async fn chat(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    handle::<ChatCompletionRequest>(app, headers, body, Kind::Chat, crate::prepare::chat).await
}

pub async fn completions(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    handle::<CompletionRequest>(
        app,
        headers,
        body,
        Kind::Completion,
        crate::prepare::completion,
    )
    .await
}

async fn handle<R: WithSampling + Send + 'static>(
    app: Arc<AppState>,
    headers: HeaderMap,
    body: Bytes,
    kind: Kind,
    prepare: fn(&Model, &R) -> Result<Prepared, GatewayError>,
) -> Response {
    let start = Instant::now();
    let endpoint = if kind == Kind::Chat {
        Endpoint::Chat
    } else {
        Endpoint::Completions
    };
    let id = RequestId::new(&headers);
    dispatch::respond(&app, endpoint, &id, async {
        let work = {
            let (app, body) = (Arc::clone(&app), body.clone());
            // The work may run on the blocking pool, where the request's span is not current.
            let span = tracing::Span::current();
            move || {
                let req: R =
                    crate::traces::stage_in(&span, "parse").in_scope(|| parse_request(&body))?;
                app.metrics
                    .stage(Stage::Parse, start.elapsed().as_secs_f64());
                let t = Instant::now();
                let prepared = crate::traces::stage_in(&span, "template_tokenize")
                    .in_scope(|| prepare(&app.model, &req))?;
                app.metrics
                    .stage(Stage::Tokenize, t.elapsed().as_secs_f64());
                Ok(prepared)
            }
        };
        let prepared = off_io_threads_if_large(body.len(), work).await?;
        dispatch::openai(
            &app,
            Request {
                headers: &headers,
                id: &id,
                body,
                prepared,
                kind,
                start,
            },
        )
        .await
    })
    .await
}
