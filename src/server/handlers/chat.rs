//! `POST /v1/chat/completions`

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::dispatch::{self, Request};
use crate::metrics::{Endpoint, Stage};
use crate::protocol::openai::ChatCompletionRequest;
use crate::relay::format::Kind;
use crate::server::body::{parse_request, JsonBytes};
use crate::server::AppState;

pub async fn chat(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    let start = Instant::now();
    dispatch::respond(&app, Endpoint::Chat, async {
        let req: ChatCompletionRequest = parse_request(&body)?;
        app.metrics
            .stage(Stage::Parse, start.elapsed().as_secs_f64());
        let t = Instant::now();
        let prepared = crate::prepare::chat(&app, &req)?;
        app.metrics
            .stage(Stage::Tokenize, t.elapsed().as_secs_f64());
        dispatch::openai(
            &app,
            Request {
                headers: &headers,
                body,
                prepared,
                kind: Kind::Chat,
                start,
            },
        )
        .await
    })
    .await
}
