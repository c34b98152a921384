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
use crate::relay::passthrough::{self, Forward};
use crate::routing::session_key;
use crate::server::body::{parse, JsonBytes};
use crate::server::request_id::RequestId;
use crate::server::AppState;

pub async fn generate(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    let start = Instant::now();
    let id = RequestId::new(&headers);
    dispatch::respond(&app, Endpoint::Generate, &id, async {
        let mut req: Map<String, Value> = parse(&body)?;
        app.metrics
            .stage(Stage::Parse, start.elapsed().as_secs_f64());
        let t = Instant::now();
        let prompt_ids = match (req.get("input_ids"), req.get("text")) {
            (Some(ids), _) => token_ids(ids, app.model.tokenizer.vocab_size())?,
            (None, Some(Value::String(text))) => {
                let text = text.clone();
                let ids = crate::tokenize::encode_off_thread(&app.model.tokenizer, text).await?;
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
        let rid = worker_rid(&req, &id.rid);
        req.insert("rid".into(), rid);
        let user = req
            .get("routing_key")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body = serde_json::to_vec(&req)
            .map_err(|e| GatewayError::invalid_body(e.to_string(), None))?;
        let forward = Forward {
            path: "/generate",
            body: body.into(),
            prompt_ids: &prompt_ids,
            session_key: session_key(&headers, user.as_deref()),
            rid: &id.rid,
            abortable: true,
            endpoint: Endpoint::Generate,
            start,
        };
        passthrough::forward(&app.relay, forward).await
    })
    .await
}

/// The `rid` the worker gets in place of whatever the client sent: ours for one prompt; for a
/// batch (`text` or `input_ids` a list of prompts) a list as long as the batch, as SGLang
/// requires, named `<ours>_i`. (SGLang's front end forwards an abort only for an exact live rid,
/// so the bare rid we abort by does not reach batch elements: they stop on the disconnect.)
fn worker_rid(req: &Map<String, Value>, rid: &str) -> Value {
    let batch = match (req.get("input_ids"), req.get("text")) {
        (Some(Value::Array(ids)), _) if ids.first().is_some_and(Value::is_array) => Some(ids.len()),
        (None, Some(Value::Array(texts))) => Some(texts.len()),
        _ => None,
    };
    match batch {
        Some(n) => (0..n).map(|i| Value::from(format!("{rid}_{i}"))).collect(),
        None => Value::from(rid),
    }
}

/// `input_ids`: a list of ids inside the vocabulary, or a batch of such lists (routed on the
/// first). Anything else is refused here rather than by the worker.
fn token_ids(v: &Value, vocab: usize) -> Result<Vec<u32>, GatewayError> {
    let bad = |msg: String| GatewayError::invalid_body(msg, Some("input_ids".into()));
    let one = |list: &Vec<Value>| -> Result<Vec<u32>, GatewayError> {
        list.iter()
            .map(|t| match t.as_u64() {
                Some(id) if (id as usize) < vocab => Ok(id as u32),
                _ => Err(bad(format!(
                    "input_ids must be token ids below the vocabulary size {vocab}, got {t}"
                ))),
            })
            .collect()
    };
    match v {
        Value::Array(items) if items.iter().all(Value::is_array) && !items.is_empty() => {
            let lists: Vec<&Vec<Value>> = items.iter().filter_map(Value::as_array).collect();
            let mut batch = lists.into_iter().map(one).collect::<Result<Vec<_>, _>>()?;
            Ok(batch.swap_remove(0))
        }
        Value::Array(items) if !items.is_empty() => one(items),
        _ => Err(bad("input_ids must be a non-empty list of token ids".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rid_for(body: Value) -> Value {
        worker_rid(body.as_object().unwrap(), "r")
    }

    #[test]
    fn the_client_rid_never_reaches_the_worker() {
        assert_eq!(rid_for(json!({"input_ids": [1, 2], "rid": ""})), json!("r"));
        assert_eq!(rid_for(json!({"text": "hi", "rid": ["a"]})), json!("r"));
        // SGLang wants one rid per prompt of a batch.
        assert_eq!(
            rid_for(json!({"input_ids": [[1], [2]], "rid": "a"})),
            json!(["r_0", "r_1"])
        );
        assert_eq!(
            rid_for(json!({"text": ["x", "y", "z"], "rid": ["a", "b", "c"]})),
            json!(["r_0", "r_1", "r_2"])
        );
    }
}
