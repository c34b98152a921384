//! `POST /generate`: SGLang's native API passed through to a worker chosen on the request's
//! `input_ids` (or its tokenized `text`); in front of gRPC workers only, translated
//! (`generate_grpc`).

use crate::upstream::abort::Abort;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::dispatch;
use crate::error::GatewayError;
use crate::metrics::{Endpoint, Stage};
use crate::model::Model;
use crate::models::Served;
use crate::protocol::openai::Prompt;
use crate::protocol::sglang::ClientGenerateRequest;
use crate::relay::passthrough::{self, Forward};
use crate::routing::session_key;
use crate::server::body::{parse_off_thread, JsonBytes};
use crate::server::request_id::RequestId;
use crate::server::AppState;
use tracing::Instrument;

pub async fn generate(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    JsonBytes(body): JsonBytes,
) -> Response {
    let start = Instant::now();
    let id = RequestId::new(&headers);
    dispatch::respond(
        &app,
        Endpoint::Generate,
        &id,
        Box::pin(async {
            let mut req: ClientGenerateRequest = parse_off_thread(body)
                .instrument(crate::traces::stage("parse"))
                .await?;
            let served = generate_model(&app, &mut req)?;
            let model = &served.model;
            served
                .metrics()
                .stage(Stage::Parse, start.elapsed().as_secs_f64());
            let t = Instant::now();
            let prompt_ids = match (&req.input_ids, req.text.take()) {
                (Some(_), Some(_)) => {
                    // As SGLang: one or the other.
                    return Err(GatewayError::invalid_body(
                        "give either text or input_ids, not both",
                        Some("input_ids".into()),
                    ));
                }
                (Some(ids), None) => check_ids(model, ids)?,
                (None, Some(Prompt::Text(text))) => {
                    crate::prepare::check_text_fits(model, text.len())?;
                    let ids = crate::tokenize::encode_off_thread(&model.tokenizer, text)
                        .instrument(crate::traces::stage("template_tokenize"))
                        .await?;
                    check_ids(model, &Prompt::Ids(ids.clone()))?;
                    // Tokenized once, here: the worker gets the ids instead of re-encoding the text.
                    req.input_ids = Some(Prompt::Ids(ids.clone()));
                    ids
                }
                (None, Some(Prompt::Texts(texts))) => {
                    for t in &texts {
                        crate::prepare::check_text_fits(model, t.len())?;
                    }
                    // A batch: the worker tokenizes it; route without a prefix.
                    req.text = Some(Prompt::Texts(texts));
                    Vec::new()
                }
                (None, Some(_)) => {
                    return Err(GatewayError::invalid_body(
                        "text must be a string or a list of strings",
                        Some("text".into()),
                    ))
                }
                (None, None) => {
                    return Err(GatewayError::invalid_body(
                        "one of text or input_ids is required",
                        None,
                    ))
                }
            };
            served
                .metrics()
                .stage(Stage::Tokenize, t.elapsed().as_secs_f64());
            let batch = batch_size(&req);
            if super::generate_grpc::only_grpc_workers(&served) {
                if batch.is_some() {
                    return Err(GatewayError::NeedsHttpWorker { route: "/generate" });
                }
                return super::generate_grpc::translated(
                    &served, &headers, &id, req, prompt_ids, start,
                )
                .await;
            }
            req.rest.insert("rid".into(), worker_rid(batch, &id.rid));
            let user = req
                .rest
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
                abort: batch.map_or(Abort::Rid, Abort::Batch),
                endpoint: Endpoint::Generate,
                start,
            };
            passthrough::forward(&served.relay, forward).await
        }),
    )
    .await
}

/// SGLang's `/generate` names no model: with several, an optional `model` field picks one (and
/// is taken out of what the worker gets); without it, the first model serves. With one model
/// the body goes on as it came, as it always did.
fn generate_model(
    app: &AppState,
    req: &mut ClientGenerateRequest,
) -> Result<Arc<Served>, GatewayError> {
    if app.models.len() == 1 {
        return Ok(Arc::clone(app.models.default_model()));
    }
    match req.rest.remove("model") {
        None | Some(Value::Null) => Ok(Arc::clone(app.models.default_model())),
        Some(Value::String(name)) => app.models.find(&name).cloned(),
        Some(_) => Err(GatewayError::invalid_body(
            "model must be a string",
            Some("model".into()),
        )),
    }
}

/// How many prompts a batch request holds (`text` or `input_ids` a list of prompts).
fn batch_size(req: &ClientGenerateRequest) -> Option<usize> {
    match (&req.input_ids, &req.text) {
        (Some(Prompt::IdBatches(b)), _) => Some(b.len()),
        (None, Some(Prompt::Texts(t))) => Some(t.len()),
        _ => None,
    }
}

/// The `rid` the worker gets in place of whatever the client sent: ours for one prompt; for a
/// batch a list as long as the batch, as SGLang requires, named `<ours>_i` — the names
/// [`Abort::Batch`] aborts them by, since SGLang forwards an abort only for an exact live rid.
fn worker_rid(batch: Option<usize>, rid: &str) -> Value {
    match batch {
        Some(n) => Abort::Batch(n)
            .rids(rid)
            .into_iter()
            .map(Value::from)
            .collect(),
        None => Value::from(rid),
    }
}

/// `input_ids`: a non-empty list of ids inside the vocabulary and the context, or a batch of
/// such lists (routed on the first). Refused here rather than by the worker.
fn check_ids(model: &Model, ids: &Prompt) -> Result<Vec<u32>, GatewayError> {
    let bad = |msg: String| GatewayError::invalid_body(msg, Some("input_ids".into()));
    let vocab = model.tokenizer.vocab_size();
    let one = |list: &[u32]| -> Result<(), GatewayError> {
        if list.is_empty() {
            return Err(bad("input_ids must be a non-empty list of token ids".into()));
        }
        if let Some(t) = list.iter().find(|&&t| t as usize >= vocab) {
            return Err(bad(format!(
                "input_ids must be token ids below the vocabulary size {vocab}, got {t}"
            )));
        }
        // No room for even one token: SGLang would refuse it too, after queueing it.
        if list.len() > model.context_length {
            return Err(GatewayError::ContextLength {
                context_length: model.context_length,
                requested: list.len(),
                prompt_tokens: list.len(),
                max_tokens: 0,
            });
        }
        Ok(())
    };
    match ids {
        Prompt::Ids(list) => one(list).map(|()| list.clone()),
        Prompt::IdBatches(batch) if !batch.is_empty() => {
            for list in batch {
                one(list)?;
            }
            Ok(batch[0].clone())
        }
        _ => Err(bad(
            "input_ids must be a list of token ids or a list of such lists".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rid_for(body: Value) -> Value {
        worker_rid(batch_size(&serde_json::from_value(body).unwrap()), "r")
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
