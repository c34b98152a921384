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
use crate::metrics::Endpoint;
use crate::model::Model;
use crate::prepare::Prepared;
use crate::protocol::openai::{ChatCompletionRequest, CompletionRequest, WithSampling};
use crate::relay::format::Kind;
use crate::server::body::{parse_request, JsonBytes};
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

async fn handle<R: WithSampling + dispatch::NamesModel + Send + 'static>(
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
    dispatch::respond(
        &app,
        endpoint,
        &id,
        Box::pin(async {
            let parsed =
                dispatch::parse_and_prepare(&app, body.clone(), start, parse_request::<R>, prepare)
                    .await?;
            dispatch::openai(
                &app,
                Request {
                    headers: &headers,
                    id: &id,
                    body,
                    served: parsed.served,
                    prepared: parsed.prepared,
                    kind,
                    start,
                },
            )
            .await
        }),
    )
    .await
}
