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
//! - this file: `switchboard sim`'s options, and `start`.

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
use std::path::PathBuf;
use std::sync::Arc;

use engine::{Engine, EngineConfig, TimingModel};
use state::{unix_now, SimState};
use version::SglangVersion;

use crate::tokenize::Tokenizer;

/// `switchboard sim` flags. Engine knobs left out keep the engine model's defaults (a ~1B
/// model on one H100; see `sim::engine::timing`).
#[derive(Debug, Clone, clap::Args)]
pub struct SimOptions {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0 picks a free one; the chosen address is printed).
    #[arg(long, default_value_t = 30001)]
    pub port: u16,
    /// Serve one independent worker on every port of this range (`40000-40999`): a fleet in one
    /// process, sharing only the tokenizer (fleet-scale benchmarks).
    #[arg(long, value_parser = parse_port_range, conflicts_with_all = ["port", "kv_events_config", "disaggregation_mode"])]
    pub ports: Option<std::ops::RangeInclusive<u16>>,
    /// Served model name (`/v1/models`).
    #[arg(long, default_value = crate::bundled::MODEL_NAME)]
    pub model_name: String,
    /// Tokenizer directory (tokenizer.json + tokenizer_config.json); default: the bundled SmolLM2 one.
    #[arg(long)]
    pub tokenizer_path: Option<PathBuf>,
    /// Context length in tokens; default: the tokenizer's model_max_length, else 32768.
    #[arg(long)]
    pub context_length: Option<usize>,
    /// The SGLang release to behave as where 0.5.9 and 0.5.23 differ (docs/simulator.md).
    #[arg(long, value_enum, default_value_t = SglangVersion::V0_5_23)]
    pub sglang_version: SglangVersion,
    /// Stream deltas instead of SGLang's default cumulative form (0.5.9's `--stream-output`:
    /// delta `output_ids` with cumulative `text`; 0.5.23: both deltas).
    #[arg(long, alias = "stream-output")]
    pub incremental_streaming_output: bool,
    /// Send only `output_ids` from `/generate` (no `text`), as SGLang's `--skip-tokenizer-init`.
    #[arg(long)]
    pub skip_tokenizer_init: bool,
    /// Serve `/metrics` (SGLang's `--enable-metrics`; without it the route is a 404).
    #[arg(long)]
    pub enable_metrics: bool,
    /// Report `prompt_tokens_details.cached_tokens` in OpenAI usage (SGLang's `--enable-cache-report`).
    #[arg(long)]
    pub enable_cache_report: bool,
    /// Chance per token that generation ends with EOS (unless `ignore_eos`); 0 = always run to max tokens.
    #[arg(long, default_value_t = 0.0)]
    pub eos_probability: f64,
    /// Multiplies every modelled duration: 0.1 runs the same model 10× faster.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// All step costs zero: as fast as the process can go (throughput tests).
    #[arg(long)]
    pub zero_latency: bool,
    #[arg(long)]
    pub max_running_requests: Option<usize>,
    /// Waiting requests beyond this are rejected with 503 (default: unlimited, as SGLang).
    #[arg(long)]
    pub max_queued_requests: Option<usize>,
    /// KV pool size in tokens (running requests and the prefix cache share it).
    #[arg(long)]
    pub kv_capacity_tokens: Option<usize>,
    #[arg(long)]
    pub chunked_prefill_size: Option<usize>,
    #[arg(long)]
    pub max_prefill_tokens: Option<usize>,
    #[arg(long)]
    pub page_size: Option<usize>,
    /// Fixed cost of a prefill step, µs.
    #[arg(long)]
    pub prefill_base_us: Option<f64>,
    /// Cost per new prompt token in a prefill step, µs.
    #[arg(long)]
    pub prefill_per_token_us: Option<f64>,
    /// Attention cost per (new token × context token) pair, ns.
    #[arg(long)]
    pub prefill_attn_ns: Option<f64>,
    /// Fixed cost of a decode step, µs.
    #[arg(long)]
    pub decode_base_us: Option<f64>,
    /// Batch size up to which a decode step costs the same.
    #[arg(long)]
    pub decode_batch_knee: Option<usize>,
    /// Extra decode cost per sequence beyond the knee, µs.
    #[arg(long)]
    pub decode_per_seq_us: Option<f64>,
    /// Decode cost per 1,000 context tokens in the batch, µs.
    #[arg(long)]
    pub decode_per_1k_ctx_us: Option<f64>,
    /// Serve SGLang's gRPC service (`SglangScheduler`, as `--grpc-mode`) on `--port` instead
    /// of HTTP; the HTTP routes (`/metrics`, `/sim/…`) move to `--metrics-port`.
    #[arg(long)]
    pub grpc_mode: bool,
    /// With `--grpc-mode`: the HTTP side port (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 0)]
    pub metrics_port: u16,
    #[command(flatten)]
    pub speculative: engine::speculative::SpeculativeArgs,
    /// SGLang's `--kv-events-config` JSON (e.g. `{"publisher":"zmq","endpoint":"tcp://*:5557",
    /// "replay_endpoint":"tcp://*:5558"}`): publish the radix cache's KV events over ZMQ.
    #[arg(long)]
    pub kv_events_config: Option<String>,
    #[command(flatten)]
    pub faults: faults::FaultConfig,
    #[command(flatten)]
    pub pd: pd::PdOptions,
    /// Data-parallel ranks: this many engines behind the port, each with its own queue, KV pool
    /// and radix cache (SGLang's `--dp-size`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub dp_size: u32,
    /// How a request that names no DP rank is given one (SGLang's `--load-balance-method`).
    #[arg(long, value_enum, default_value_t = dp::LoadBalanceMethod::Auto)]
    pub load_balance_method: dp::LoadBalanceMethod,
}

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

impl SimOptions {
    fn engine_config(&self, context_length: usize) -> Result<EngineConfig, SimError> {
        let d = EngineConfig::default();
        let t = if self.zero_latency {
            TimingModel::zero()
        } else {
            d.timing
        };
        Ok(EngineConfig {
            max_running_requests: self.max_running_requests.unwrap_or(d.max_running_requests),
            max_queued_requests: self.max_queued_requests.or(d.max_queued_requests),
            kv_capacity_tokens: self.kv_capacity_tokens.unwrap_or(d.kv_capacity_tokens),
            chunked_prefill_size: self.chunked_prefill_size.unwrap_or(d.chunked_prefill_size),
            max_prefill_tokens: self.max_prefill_tokens.unwrap_or(d.max_prefill_tokens),
            page_size: self.page_size.unwrap_or(d.page_size),
            context_length,
            timing: TimingModel {
                prefill_base_us: self.prefill_base_us.unwrap_or(t.prefill_base_us),
                prefill_per_token_us: self.prefill_per_token_us.unwrap_or(t.prefill_per_token_us),
                prefill_attn_ns: self.prefill_attn_ns.unwrap_or(t.prefill_attn_ns),
                decode_base_us: self.decode_base_us.unwrap_or(t.decode_base_us),
                decode_batch_knee: self.decode_batch_knee.unwrap_or(t.decode_batch_knee),
                decode_per_seq_us: self.decode_per_seq_us.unwrap_or(t.decode_per_seq_us),
                decode_per_1k_ctx_us: self.decode_per_1k_ctx_us.unwrap_or(t.decode_per_1k_ctx_us),
            },
            speculative: self.speculative.resolve()?,
        })
    }
}

/// A running simulator.
pub struct SimHandle {
    pub addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
    /// `--grpc-mode`: where the HTTP routes are served (`addr` speaks gRPC).
    pub metrics_addr: Option<SocketAddr>,
}

fn parse_port_range(s: &str) -> Result<std::ops::RangeInclusive<u16>, String> {
    let bad = || format!("expected FIRST-LAST (e.g. 40000-40999), got {s:?}");
    let (first, last) = s.split_once('-').ok_or_else(bad)?;
    let first: u16 = first.trim().parse().map_err(|_| bad())?;
    let last: u16 = last.trim().parse().map_err(|_| bad())?;
    if first == 0 || first > last {
        return Err(bad());
    }
    Ok(first..=last)
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

impl SimOptions {
    /// Options from flag strings, with every default filled in (for in-process simulators).
    pub fn from_args_list(args: &[&str]) -> Result<SimOptions, clap::Error> {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            sim: SimOptions,
        }
        let matches = <Wrapper as clap::CommandFactory>::command()
            .try_get_matches_from(std::iter::once("sim").chain(args.iter().copied()))?;
        Ok(Wrapper::from_arg_matches(&matches)?.sim)
    }
}
