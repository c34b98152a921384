//! The simulator's HTTP surface: routes, shared state and response helpers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::Driver;
use super::faults::{FaultConfig, Faults};
use super::metrics::SimMetrics;
use super::vocab::OutputVocab;
use super::{generate, openai};
use crate::stream::sse;
use crate::tokenize::Tokenizer;

pub struct SimState {
    pub model_name: String,
    pub tokenizer_path: String,
    pub tokenizer: Arc<Tokenizer>,
    pub vocab: OutputVocab,
    pub driver: Arc<Driver>,
    pub faults: Faults,
    pub metrics: SimMetrics,
    pub context_length: usize,
    pub incremental_output: bool,
    pub skip_tokenizer_init: bool,
    pub cache_report: bool,
    pub eos_probability: f64,
    pub server_args: serde_json::Value,
    pub started_unix: u64,
    /// The last requests' rids and prompt ids, for `GET /sim/requests` (tests check what a
    /// gateway really sent).
    pub recent: std::sync::Mutex<std::collections::VecDeque<ReceivedRequest>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReceivedRequest {
    pub rid: String,
    pub input_ids: Vec<u32>,
    pub max_new_tokens: Option<u32>,
}

/// How many received requests `/sim/requests` remembers.
pub const RECENT_REQUESTS: usize = 256;

impl SimState {
    pub fn record(&self, req: ReceivedRequest) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT_REQUESTS {
            recent.pop_front();
        }
        recent.push_back(req);
    }
}

pub fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route(
            "/generate",
            post(generate::generate).put(generate::generate),
        )
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/health", get(health))
        .route("/health_generate", get(health))
        .route("/ready", get(health))
        .route("/model_info", get(model_info))
        .route("/get_model_info", get(model_info))
        .route("/server_info", get(server_info))
        .route("/get_server_info", get(server_info))
        .route("/v1/models", get(models))
        .route("/v1/loads", get(loads))
        .route("/get_load", get(get_load))
        .route("/abort_request", post(abort_request))
        .route("/flush_cache", get(flush_cache).post(flush_cache))
        .route("/metrics", get(metrics))
        .route("/sim/faults", get(get_faults).post(set_faults))
        .route("/sim/requests", get(recent_requests))
        .with_state(state)
}

// === response helpers ===

pub fn json<T: Serialize>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

pub fn bad_request(message: &str) -> Response {
    json(
        StatusCode::BAD_REQUEST,
        &json!({ "error": { "message": message } }),
    )
}

/// An SSE response ending with `data: [DONE]`; an `Err` item resets the connection instead.
pub fn sse_response<S, E>(events: S) -> Response
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let done = futures_util::stream::once(async { Ok(Bytes::from_static(sse::DONE)) });
    let body = Body::from_stream(events.chain(done));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// A non-streaming answer cut by the connection-reset fault: a body that errors at once, so
/// hyper drops the connection without a complete response.
pub fn reset() -> Response {
    let failing =
        futures_util::stream::once(async { Err::<Bytes, _>(super::run::StreamFault::Die) });
    Response::new(Body::from_stream(failing))
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// === info and admin routes ===

async fn health(State(state): State<Arc<SimState>>) -> StatusCode {
    let slow = state.faults.get().slow_health_secs;
    if slow > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(slow)).await;
    }
    if state.faults.health_down() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn model_info(State(s): State<Arc<SimState>>) -> Response {
    json(
        StatusCode::OK,
        &json!({
            "model_path": s.model_name, "served_model_name": s.model_name, "tokenizer_path": s.tokenizer_path,
            "is_generation": true, "preferred_sampling_params": null, "weight_version": "default",
            "has_image_understanding": false, "has_audio_understanding": false, "model_type": "simulated",
            "architectures": ["SimulatedForCausalLM"], "max_context_length": s.context_length,
        }),
    )
}

async fn server_info(State(s): State<Arc<SimState>>) -> Response {
    let loads = s.driver.loads();
    let mut info = s.server_args.clone();
    if let Some(map) = info.as_object_mut() {
        map.insert("status".into(), json!("ready"));
        map.insert(
            "max_total_num_tokens".into(),
            json!(loads.max_total_num_tokens),
        );
        map.insert(
            "max_req_input_len".into(),
            json!(s.context_length.saturating_sub(1)),
        );
        map.insert("startup_time".into(), json!(s.started_unix));
        map.insert(
            "internal_states".into(),
            json!([{ "last_gen_throughput": 0.0 }]),
        );
        map.insert("version".into(), json!("0.5.23"));
        map.insert("frontend".into(), json!("switchboard-sim"));
    }
    json(StatusCode::OK, &info)
}

async fn models(State(s): State<Arc<SimState>>) -> Response {
    json(
        StatusCode::OK,
        &json!({"object":"list","data":[{"id":s.model_name,"object":"model","created":s.started_unix,"owned_by":"sglang","root":s.model_name,"parent":null,"max_model_len":s.context_length}]}),
    )
}

async fn loads(State(s): State<Arc<SimState>>) -> Response {
    let load = s.driver.loads();
    json(
        StatusCode::OK,
        &json!({"timestamp": unix_now(), "version": "0.5.23", "accelerator": "simulated", "num_accelerators": 1, "loads": [load]}),
    )
}

/// SGLang 0.5.9's deprecated form: a list, one item per DP rank.
async fn get_load(State(s): State<Arc<SimState>>) -> Response {
    let l = s.driver.loads();
    json(
        StatusCode::OK,
        &json!([{"rid":null,"http_worker_ipc":null,"dp_rank":0,"num_reqs":l.num_running_reqs + l.num_waiting_reqs,
            "num_waiting_reqs":l.num_waiting_reqs,"num_tokens":l.num_used_tokens + l.num_waiting_uncached_tokens}]),
    )
}

#[derive(Deserialize)]
struct AbortBody {
    #[serde(default)]
    rid: String,
    #[serde(default)]
    abort_all: bool,
}

async fn abort_request(State(s): State<Arc<SimState>>, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<AbortBody>(&body) else {
        return bad_request("expected {\"rid\": ...}");
    };
    // An empty rid without abort_all is ignored, as in SGLang.
    if !req.rid.is_empty() || req.abort_all {
        s.metrics.abort_requests.inc();
        let delay = s.faults.get().abort_delay_secs;
        if delay > 0.0 {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_secs_f64(delay)).await;
                s.driver.abort_by_rid(&req.rid, req.abort_all);
            });
        } else {
            s.driver.abort_by_rid(&req.rid, req.abort_all);
        }
    }
    StatusCode::OK.into_response()
}

/// `?timeout=` is accepted and ignored: the simulated flush is instant.
async fn flush_cache(State(s): State<Arc<SimState>>) -> Response {
    if s.driver.flush_cache() {
        (StatusCode::OK, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n").into_response()
    } else {
        (
            StatusCode::BAD_REQUEST,
            "Cache not flushed: the server is not idle.\n",
        )
            .into_response()
    }
}

async fn metrics(State(s): State<Arc<SimState>>) -> Response {
    let text = s.metrics.render(&s.driver.loads());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn get_faults(State(s): State<Arc<SimState>>) -> Response {
    json(StatusCode::OK, &s.faults.get())
}

async fn set_faults(State(s): State<Arc<SimState>>, body: Bytes) -> Response {
    match serde_json::from_slice::<FaultConfig>(&body) {
        Ok(f) => {
            s.faults.set(f);
            json(StatusCode::OK, &s.faults.get())
        }
        Err(e) => bad_request(&e.to_string()),
    }
}

async fn recent_requests(State(s): State<Arc<SimState>>) -> Response {
    let recent: Vec<ReceivedRequest> = s
        .recent
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect();
    json(StatusCode::OK, &recent)
}
