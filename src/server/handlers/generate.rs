//! `POST /generate`: SGLang's native API passed through to a worker chosen on the request's
//! `input_ids` (or its tokenized `text`).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Map, Value};

use super::dispatch;
use crate::error::GatewayError;
use crate::metrics::{Endpoint, Stage};
use crate::server::body::{parse, JsonBytes};
use crate::server::{request_id, AppState};

pub async fn generate(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    let start = Instant::now();
    dispatch::respond(&app, Endpoint::Generate, async {
        let mut req: Map<String, Value> = parse(&body)?;
        app.metrics
            .stage(Stage::Parse, start.elapsed().as_secs_f64());
        let t = Instant::now();
        let prompt_ids = match (req.get("input_ids"), req.get("text")) {
            (Some(Value::Array(ids)), _) => ids
                .iter()
                .filter_map(Value::as_u64)
                .map(|t| t as u32)
                .collect(),
            (None, Some(Value::String(text))) => {
                let text = text.clone();
                let ids = crate::tokenize::encode_off_thread(&app.tokenizer, text).await?;
                // Tokenized once, here: the worker gets the ids instead of re-encoding the text.
                req.remove("text");
                req.insert("input_ids".into(), Value::from(ids.clone()));
                ids
            }
            (None, None) => {
                return Err(GatewayError::invalid_body(
                    "one of text or input_ids is required",
                    None,
                ))
            }
            // Batches and other shapes: the worker validates them; route without a prefix.
            _ => Vec::new(),
        };
        app.metrics
            .stage(Stage::Tokenize, t.elapsed().as_secs_f64());
        let rid = match req.get("rid").and_then(Value::as_str) {
            Some(r) => r.to_owned(),
            None => {
                let r = request_id::from_headers(&headers);
                req.insert("rid".into(), Value::from(r.clone()));
                r
            }
        };
        let user = req
            .get("routing_key")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body = serde_json::to_vec(&req)
            .map_err(|e| GatewayError::invalid_body(e.to_string(), None))?;
        let spec = dispatch::ForwardSpec {
            path: "/generate",
            body: body.into(),
            prompt_ids: &prompt_ids,
            session_key: dispatch::session_key(&headers, user.as_deref()),
            rid: &rid,
            abortable: true,
            endpoint: Endpoint::Generate,
            start,
        };
        dispatch::forward(&app, spec).await
    })
    .await
}
