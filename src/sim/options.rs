//! `switchboard sim`'s flags, and the engine settings they make.

use std::path::PathBuf;

use super::engine::{self, EngineConfig, TimingModel};
use super::version::SglangVersion;
use super::{dp, faults, pd};

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
    /// Log filter (`info`; `switchboard::sim::driver=debug` adds a line per scheduler step and
    /// per admitted request: how a load's requests fall into prefill batches).
    #[arg(long, default_value = "info")]
    pub log_level: String,
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

impl SimOptions {
    pub(super) fn engine_config(
        &self,
        context_length: usize,
    ) -> Result<EngineConfig, engine::speculative::SpecError> {
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
