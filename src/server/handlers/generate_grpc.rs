//! `/generate` in front of gRPC workers, which have no `/generate` to forward the body to: the
//! request is translated onto the token-id path (the same `Generation` as chat, with retries,
//! deadlines and migration) and answered in SGLang's own `/generate` shape (`relay::native`).
//! With any HTTP worker in the fleet, `/generate` is forwarded to those instead.

use std::time::Instant;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use crate::error::GatewayError;
use crate::metrics::Endpoint;
use crate::models::Served;
use crate::protocol::sglang::{ClientGenerateRequest, SamplingParams};
use crate::relay::generation::Spec;
use crate::relay::{native, Generation};
use crate::routing::session_key;
use crate::server::request_id::RequestId;

/// Fields only a worker's own `/generate` can honour: their requests need an HTTP worker.
const NEEDS_THE_WORKER: [&str; 7] = [
    "return_logprob",
    "return_hidden_states",
    "image_data",
    "audio_data",
    "video_data",
    "input_embeds",
    "lora_path",
];

/// Every worker of the model speaks gRPC: `/generate` has to be translated.
pub fn only_grpc_workers(served: &Served) -> bool {
    crate::relay::passthrough::grpc_workers(&served.relay, "/generate").is_err()
}

pub async fn translated(
    served: &Served,
    headers: &HeaderMap,
    id: &RequestId,
    req: ClientGenerateRequest,
    prompt_ids: Vec<u32>,
    start: Instant,
) -> Result<Response, GatewayError> {
    let asks = |key: &str| match req.rest.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(_) => true,
    };
    if NEEDS_THE_WORKER.iter().any(|k| asks(k)) {
        return Err(GatewayError::NeedsHttpWorker { route: "/generate" });
    }
    let params: SamplingParams = match req.rest.get("sampling_params") {
        None | Some(Value::Null) => SamplingParams::default(),
        Some(v) => <SamplingParams as serde::Deserialize>::deserialize(v).map_err(|e| {
            GatewayError::invalid_body(
                format!("sampling_params: {e}"),
                Some("sampling_params".into()),
            )
        })?,
    };
    let stream = matches!(req.rest.get("stream"), Some(Value::Bool(true)));
    let user = req.rest.get("routing_key").and_then(Value::as_str);
    let spec = Spec {
        rid: id.rid.clone(),
        prompt: prompt_ids,
        params,
        session_key: session_key(headers, user).map(str::to_owned),
        // `return_logprob` is refused above: `relay::native` does not write `meta_info`'s
        // logprob triples yet.
        logprobs: None,
        prefer: None,
        whole: false,
    }
    .for_client(stream);
    let generation = Generation::start(&served.relay, spec, Endpoint::Generate, start).await?;
    Ok(if stream {
        native::stream(generation, id.rid.clone(), start)
    } else {
        native::whole(generation, id.rid.clone(), start).await
    })
}
