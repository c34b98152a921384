//! `POST /v1/messages` (Anthropic Messages) and `POST /v1/responses` (OpenAI Responses): other
//! front doors to the token-id path. Parsed and mapped into a chat request's prepared form,
//! then served by the same exchange core as chat, relayed in the API's own grammar.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::dispatch::{self, NamesModel, Native, Parsed};
use crate::config::BackendKind;
use crate::error::GatewayError;
use crate::metrics::Endpoint;
use crate::prepare::Prepared;
use crate::protocol::anthropic::{error_kind, ErrorBody};
use crate::protocol::openai::ErrorBody as OpenAiErrorBody;
use crate::relay::messages::MessagesFormat;
use crate::relay::responses::ResponsesFormat;
use crate::server::body::{parse, JsonBytes};
use crate::server::request_id::RequestId;
use crate::server::AppState;

pub const MESSAGES_PATH: &str = "/v1/messages";

pub async fn messages(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    let start = Instant::now();
    let id = RequestId::new(&headers);
    dispatch::respond(
        &app,
        Endpoint::Messages,
        &id,
        Box::pin(async {
            let parsed =
                parse_and_prepare(&app, body, start, crate::prepare::messages::prepare).await?;
            let grammar = MessagesFormat::new(&id.rid, Arc::clone(&parsed.served.model.name));
            let native = Native {
                headers: &headers,
                id: &id,
                served: &parsed.served,
                endpoint: Endpoint::Messages,
                start,
            };
            dispatch::native_path(native, parsed.prepared, grammar).await
        }),
    )
    .await
}

pub async fn responses(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    let start = Instant::now();
    let id = RequestId::new(&headers);
    dispatch::respond(
        &app,
        Endpoint::Responses,
        &id,
        Box::pin(async {
            let parsed =
                parse_and_prepare(&app, body, start, crate::prepare::responses::prepare).await?;
            let name = Arc::clone(&parsed.served.model.name);
            let grammar = ResponsesFormat::new(&id.rid, name, parsed.req.settings());
            let native = Native {
                headers: &headers,
                id: &id,
                served: &parsed.served,
                endpoint: Endpoint::Responses,
                start,
            };
            dispatch::native_path(native, parsed.prepared, grammar).await
        }),
    )
    .await
}

/// These routes exist only on the token-id path: they need workers that serve SGLang's
/// `/generate`.
async fn parse_and_prepare<R>(
    app: &Arc<AppState>,
    body: Bytes,
    start: Instant,
    prepare: fn(&crate::model::Model, &R) -> Result<Prepared, GatewayError>,
) -> Result<Parsed<R>, GatewayError>
where
    R: serde::de::DeserializeOwned + NamesModel + Send + 'static,
{
    if app.config.backend == BackendKind::Openai {
        return Err(GatewayError::invalid_body(
            "this route is served on SGLang's /generate; the gateway runs with --backend openai",
            None,
        ));
    }
    dispatch::parse_and_prepare(app, body, start, parse::<R>, prepare).await
}

/// Middleware: every error `/v1/messages` answers (the body's, the key check's, admission's)
/// in Anthropic's shape, `{"type":"error","error":{"type","message"}}`, with its status codes.
/// Errors leave `GatewayError` with their OpenAI body in the response's extensions.
pub async fn anthropic_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let Some(openai) = resp.extensions().get::<OpenAiErrorBody>() else {
        return resp;
    };
    let (status, kind) = error_kind(resp.status().as_u16());
    let body = serde_json::to_vec(&ErrorBody::new(kind, &openai.error.message)).unwrap_or_default();
    let (mut parts, _) = resp.into_parts();
    parts.status = StatusCode::from_u16(status).unwrap_or(parts.status);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    (parts, body).into_response()
}
