//! A simulated SGLang worker: SGLang's HTTP API in front of a pure engine model (continuous
//! batching, chunked prefill, a radix prefix cache, a step-time model), generating real
//! vocabulary words. Used by every test, demo and benchmark; also runnable on its own.
//!
//! Modules, bottom to top: each imports only modules listed above it (no cycles), and from the
//! rest of the crate only the wire-level `protocol`, `stream`, `tokenize`, `bundled` and `net`.
//! - `version`: `--sglang-version`, the release whose behaviour is followed where they differ.
//! - `kv_events`: SGLang's KV events (`--kv-events-config`): block hashes, wire, ZMQ publisher.
//! - `radix`: the radix prefix cache over token ids.
//! - `engine`: the pure engine model (scheduling, chunked prefill, KV pool, step times).
//! - `vocab`: the real words the simulator generates, as token ids.
//! - `script`: `POST /sim/script` rules that make the model say a given text.
//! - `plan`: what one request will generate, decided up front from its prompt and sampling.
//! - `faults`: fault knobs, set by flags or `POST /sim/faults`.
//! - `metrics`: SGLang's Prometheus metrics; `gauges`: when its load gauges change.
//! - `driver`: runs the engine in real time and hands each request its tokens.
//! - `dp`: `--dp-size`: one engine (driver) per DP rank, and the controller's dispatch.
//! - `shapes`: SGLang's OpenAI response objects, as serde structs.
//! - `state`: what every handler shares.
//! - `validate`: the front end's checks (sampling bounds, context length) per version.
//! - `run`: one generation from admission to its last token.
//! - `reply`: JSON and error replies, and the one stream skeleton every route formats.
//! - `generate`: the native `/generate` route.
//! - `openai`: `/v1/chat/completions` and `/v1/completions`.
//! - `background_hits`: counts of health/load/info requests (`GET /sim/background`).
//! - `server`: the router, and the info and admin routes.
//! - `grpc`: `--grpc-mode`, the same engine over SGLang's gRPC service.
//! - `options`: `switchboard sim`'s flags, and the engine settings they make.
//! - this file: `start`.

mod background_hits;
mod dp;
mod driver;
pub mod engine;
pub mod faults;
mod gauges;
mod generate;
mod grpc;
pub mod kv_events;
mod logprobs;
mod metrics;
mod openai;
mod options;
mod parallel;
pub mod pd;
mod plan;
pub mod radix;
mod reply;
mod run;
mod script;
mod server;
mod shapes;
mod state;
mod trace_headers;
mod validate;
pub mod version;
pub mod vocab;

use std::net::SocketAddr;
use std::sync::Arc;

pub use options::SimOptions;

use engine::Engine;
use state::{unix_now, SimState};

use crate::tokenize::Tokenizer;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenize::TokenizeError),
    #[error(transparent)]
    Vocab(#[from] vocab::VocabError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error(transparent)]
    Bind(#[from] crate::net::BindError),
    #[error(transparent)]
    Speculative(#[from] engine::speculative::SpecError),
    #[error(transparent)]
    KvEvents(#[from] kv_events::KvEventsError),
}

/// A running simulator.
pub struct SimHandle {
    pub addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
    /// `--grpc-mode`: where the HTTP routes are served (`addr` speaks gRPC).
    pub metrics_addr: Option<SocketAddr>,
}

/// What every simulated worker of one process can share: the tokenizer and the words drawn
/// from it (a fleet of 1,000 workers would otherwise hold 1,000 tokenizers).
#[derive(Clone)]
pub struct SimModel {
    tokenizer: Arc<Tokenizer>,
    tokenizer_path: String,
    vocab: Arc<vocab::OutputVocab>,
}

impl SimModel {
    pub fn load(opts: &SimOptions) -> Result<SimModel, SimError> {
        let (tokenizer, tokenizer_path) = match &opts.tokenizer_path {
            Some(dir) => (Tokenizer::from_dir(dir)?, dir.display().to_string()),
            None => (
                crate::bundled::tokenizer()?,
                crate::bundled::MODEL_NAME.to_owned(),
            ),
        };
        let vocab = Arc::new(vocab::OutputVocab::from_tokenizer(&tokenizer)?);
        Ok(SimModel {
            tokenizer: Arc::new(tokenizer),
            tokenizer_path,
            vocab,
        })
    }
}

/// Binds, starts the engine and serves in the background.
pub async fn start(opts: SimOptions) -> Result<SimHandle, SimError> {
    let model = SimModel::load(&opts)?;
    start_with(opts, model).await
}

/// [`start`] with a tokenizer already loaded (`--ports`: one per process).
pub async fn start_with(opts: SimOptions, model: SimModel) -> Result<SimHandle, SimError> {
    let SimModel {
        tokenizer,
        tokenizer_path,
        vocab,
    } = model;
    let context_length = opts
        .context_length
        .or(tokenizer.model_max_length())
        .unwrap_or(32768);
    let config = opts.engine_config(context_length)?;
    let mut server_args = serde_json::json!({
        "model_path": opts.model_name, "served_model_name": opts.model_name, "tokenizer_path": tokenizer_path,
        "tp_size": 1, "dp_size": opts.dp_size, "page_size": config.page_size, "chunked_prefill_size": config.chunked_prefill_size,
        "max_prefill_tokens": config.max_prefill_tokens, "max_running_requests": config.max_running_requests,
        "max_queued_requests": config.max_queued_requests, "context_length": opts.context_length, "schedule_policy": "fcfs",
        "enable_cache_report": opts.enable_cache_report, "incremental_streaming_output": opts.incremental_streaming_output,
        "stream_output": opts.incremental_streaming_output,
        "time_scale": opts.time_scale, "timing": config.timing,
        "disaggregation_mode": opts.pd.disaggregation_mode,
        "kv_events_config": opts.kv_events_config, "enable_metrics": opts.enable_metrics,
        "load_balance_method": opts.load_balance_method.resolve(opts.pd.disaggregation_mode),
    });
    speculative_server_args(&mut server_args, config.speculative.as_ref());
    let config_spec = config.speculative;
    let page_size = config.page_size;
    let pd = pd::Pd::new(&opts.pd);
    if pd.mode == pd::Mode::Prefill {
        let (tcp, addr) =
            crate::net::bind(&opts.host, opts.pd.disaggregation_bootstrap_port).await?;
        server_args["disaggregation_bootstrap_port"] = addr.port().into();
        let bootstrap = pd::BootstrapServer {
            rooms: std::sync::Arc::clone(&pd.rooms),
            parallel: pd::ParallelInfo {
                dp_size: opts.dp_size.max(1) as usize,
                follow_bootstrap_room: opts.load_balance_method.resolve(pd.mode)
                    == dp::LoadBalanceMethod::FollowBootstrapRoom,
            },
            base_us: opts.pd.disaggregation_transfer_base_us,
            per_token_us: opts.pd.disaggregation_transfer_us_per_token,
            time_scale: if opts.zero_latency {
                0.0
            } else {
                opts.time_scale
            },
        };
        pd::serve_bootstrap(crate::net::Listener::new(tcp), bootstrap);
    }
    let mut drivers = Vec::new();
    // What `SubscribeKvEvents` relays (`--grpc-mode`): every rank's publisher.
    let mut kv_events_taps = Vec::new();
    for rank in 0..opts.dp_size.max(1) {
        drivers.push(driver::Driver::start(
            Engine::new(config.clone()),
            opts.time_scale,
        ));
        if opts.enable_metrics {
            if let Some(d) = drivers.last() {
                d.report_gauges(opts.sglang_version);
            }
        }
        if let Some(json) = &opts.kv_events_config {
            if let Some(cfg) = kv_events::KvEventsConfig::parse(json)? {
                // Each rank publishes on the endpoint's port + its rank, as SGLang's do.
                let publisher = kv_events::publisher::PublisherOptions {
                    version: opts.sglang_version,
                    page_size: page_size.max(1),
                    dp_rank: rank,
                };
                let started = kv_events::publisher::start(&cfg, publisher).await?;
                if let Some(d) = drivers.last() {
                    d.publish_kv_events(started.sink);
                }
                kv_events_taps.push(started.tap);
            }
        }
    }
    let method = opts
        .load_balance_method
        .resolve(opts.pd.disaggregation_mode);
    let driver = dp::Ranks::new(drivers, method);
    let state = Arc::new(SimState {
        model_name: opts.model_name.clone(),
        tokenizer_path,
        tokenizer,
        vocab,
        driver,
        faults: faults::Faults::new(opts.faults.clone()),
        metrics: metrics::SimMetrics::new(
            &opts.model_name,
            opts.sglang_version,
            config_spec.as_ref(),
            opts.pd.disaggregation_mode,
        )?,
        context_length,
        version: opts.sglang_version,
        incremental_output: opts.incremental_streaming_output,
        skip_tokenizer_init: opts.skip_tokenizer_init,
        cache_report: opts.enable_cache_report,
        eos_probability: opts.eos_probability,
        server_args,
        started_unix: unix_now(),
        recent: Default::default(),
        scripts: Default::default(),
        pd,
        page_size: page_size.max(1),
        kv_events_taps,
    });
    let (tcp, local) = crate::net::bind(&opts.host, opts.port).await?;
    let faults_state = Arc::clone(&state);
    let listener = crate::net::Listener::new(tcp)
        .with_refuse_switch(Arc::new(move || faults_state.faults.refuse_connections()));
    if opts.grpc_mode {
        return grpc::start(state, listener, local, &opts.host, opts.metrics_port).await;
    }
    let app = server::router(state);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "simulator server stopped");
        }
    });
    Ok(SimHandle {
        addr: local,
        task,
        metrics_addr: None,
    })
}

/// SGLang's server args for speculation (`null`s without it), with the model's constants under
/// `speculative_model` (not an SGLang field).
fn speculative_server_args(args: &mut serde_json::Value, spec: Option<&engine::Speculative>) {
    let Some(map) = args.as_object_mut() else {
        return;
    };
    let (algorithm, steps, topk, draft) = match spec {
        Some(s) => (
            serde_json::json!(s.reported_algorithm()),
            serde_json::json!(s.num_steps),
            serde_json::json!(s.eagle_topk),
            serde_json::json!(s.num_draft_tokens),
        ),
        None => Default::default(),
    };
    map.insert("speculative_algorithm".into(), algorithm);
    map.insert("speculative_num_steps".into(), steps);
    map.insert("speculative_eagle_topk".into(), topk);
    map.insert("speculative_num_draft_tokens".into(), draft);
    if let Some(s) = spec {
        map.insert("speculative_model".into(), serde_json::json!(s));
    }
}
