//! The simulator's HTTP surface: the router, and the info and admin routes.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::json;

use super::faults::FaultConfig;
use super::reply::{bad_request, json};
use super::script::RuleRequest;
use super::state::{unix_now, SimState};
use super::{generate, openai};
use crate::protocol::openai::{ModelCard, ModelList};

pub fn router(state: Arc<SimState>) -> Router {
    let routes = Router::new()
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
        .route("/sim/script", post(add_script).delete(clear_scripts))
        .with_state(state);
    super::background_hits::counted(super::trace_headers::recorded(routes))
}

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
            "architectures": ["SimulatedForCausalLM"],
        }),
    )
}

async fn server_info(State(s): State<Arc<SimState>>) -> Response {
    // Rank 0's figures, as SGLang reports its first scheduler's.
    let loads = s.driver.rank_loads().swap_remove(0);
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
        map.insert("internal_states".into(), json!([internal_state(&s)]));
        map.insert("version".into(), json!(s.version.as_str()));
        map.insert("frontend".into(), json!("switchboard-sim"));
    }
    json(StatusCode::OK, &info)
}

/// One scheduler's `get_internal_state` (`scheduler.py`): its recent generation throughput and,
/// with speculation, the lifetime `avg_spec_accept_length` (absent before the first round).
fn internal_state(s: &SimState) -> serde_json::Value {
    let decode = s.driver.decode_stats();
    let mut state = json!({
        "last_gen_throughput": decode.recent_tokens_per_s,
    });
    if let (Some(len), Some(map)) = (decode.avg_accept_length, state.as_object_mut()) {
        map.insert("avg_spec_accept_length".into(), json!(len));
    }
    state
}

async fn models(State(s): State<Arc<SimState>>) -> Response {
    let card = ModelCard {
        id: &s.model_name,
        object: "model",
        created: s.started_unix,
        owned_by: "sglang",
        root: &s.model_name,
        parent: None,
        max_model_len: s.context_length,
    };
    json(
        StatusCode::OK,
        &ModelList {
            object: "list",
            data: vec![card],
        },
    )
}

/// `/v1/loads` (`entrypoints/v1_loads.py`): one entry per DP rank; 0.5.9's entries have no
/// `num_waiting_uncached_tokens`.
async fn loads(State(s): State<Arc<SimState>>) -> Response {
    let ranks = s.driver.rank_loads();
    let count = ranks.len();
    let loads: Vec<serde_json::Value> = ranks
        .into_iter()
        .map(|rank| {
            let mut load = json!(rank);
            if !s.version.loads_report_uncached_tokens() {
                if let Some(map) = load.as_object_mut() {
                    map.remove("num_waiting_uncached_tokens");
                }
            }
            load
        })
        .collect();
    json(
        StatusCode::OK,
        &json!({"timestamp": unix_now(), "version": s.version.as_str(), "dp_rank_count": count, "loads": loads}),
    )
}

/// SGLang 0.5.9's deprecated form (`Scheduler.get_load`): a list, one item per DP rank, whose
/// `num_tokens` is used KV plus the waiting requests' tokens. Gone in 0.5.23 (FastAPI's 404).
async fn get_load(State(s): State<Arc<SimState>>) -> Response {
    if !s.version.has_get_load() {
        return json(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}));
    }
    let ranks: Vec<serde_json::Value> = s.driver.rank_loads().iter().map(|l| {
        json!({"rid":null,"http_worker_ipc":null,"dp_rank":l.dp_rank,"num_reqs":l.num_running_reqs + l.num_waiting_reqs,
            "num_waiting_reqs":l.num_waiting_reqs,"num_tokens":l.num_used_tokens + l.num_waiting_uncached_tokens})
    }).collect();
    json(StatusCode::OK, &ranks)
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
                tokio::time::sleep(Duration::from_secs_f64(delay)).await;
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

/// Only with `--enable-metrics`, as SGLang mounts its Prometheus app (`http_server.py`).
async fn metrics(State(s): State<Arc<SimState>>) -> Response {
    let Some(gauges) = s.driver.reported_gauges() else {
        return json(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}));
    };
    s.metrics.set_decode(&s.driver.decode_stats());
    let text = s.metrics.render(&gauges);
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

async fn add_script(State(s): State<Arc<SimState>>, body: Bytes) -> Response {
    let added = serde_json::from_slice::<RuleRequest>(&body)
        .map_err(|e| e.to_string())
        .and_then(|rule| s.scripts.add(&s.tokenizer, rule));
    match added {
        Ok(rules) => json(StatusCode::OK, &serde_json::json!({ "rules": rules })),
        Err(e) => bad_request(&e),
    }
}

async fn clear_scripts(State(s): State<Arc<SimState>>) -> Response {
    s.scripts.clear();
    json(StatusCode::OK, &serde_json::json!({ "rules": 0 }))
}

async fn recent_requests(State(s): State<Arc<SimState>>) -> Response {
    json(StatusCode::OK, &s.recent_requests())
}
