//! The simulator's Prometheus metrics, under SGLang's own `sglang:*` names and labels: the
//! scheduler's gauges carry `model_name`, `engine_type`, `tp_rank`, `pp_rank`, `moe_ep_rank`;
//! the tokenizer's counters and histograms `model_name` (0.5.23: also `engine_type`, and
//! `is_streaming` on the request counters, `e2e` and TTFT); `cached_tokens_total` has
//! `cache_source` (`total` without HiCache). Sources: 0.5.9 `metrics/collector.py`,
//! `managers/scheduler_metrics_mixin.py::init_metrics`, `tokenizer_manager.py`
//! (`init_metric_collector_watchdog`); 0.5.23 `observability/metrics_collector.py`
//! (`tokenizer_metric_labels`, `SchedulerMetricsCollector` labels).

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
    TextEncoder,
};

use super::engine::{DecodeStats, Speculative};
use super::gauges::Reported;
use super::pd::Mode;
use super::version::SglangVersion;

/// Reads one load gauge from the last stats report.
type ReadLoad = fn(&Reported) -> f64;

pub struct SimMetrics {
    registry: Registry,
    /// `sglang:num_requests_total` and the token counters move when a request finishes.
    requests: IntCounterVec,
    pub aborted: IntCounter,
    pub abort_requests: IntCounter,
    /// Not SGLang's: every request that reached the sim, counted on arrival.
    pub received: IntCounter,
    prompt_tokens: IntCounterVec,
    generation_tokens: IntCounterVec,
    cached_tokens: IntCounterVec,
    ttft: HistogramVec,
    pub itl: prometheus::Histogram,
    e2e: HistogramVec,
    gauges: Vec<(Gauge, ReadLoad)>,
    /// `sglang:spec_verify_calls_total` (0.5.23): verify rounds of finished requests.
    pub spec_verify_calls: Option<IntCounter>,
    decode_gauges: Vec<(Gauge, ReadDecode)>,
    spec: Option<Speculative>,
    version: SglangVersion,
}

/// Reads one decode gauge at scrape time from the recent decode figures and the speculative
/// configuration (`None` without speculation).
type ReadDecode = fn(&DecodeStats, Option<&Speculative>, SglangVersion) -> f64;

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
    20.0, 40.0, 80.0,
];

/// What a request reports when it ends (`observe_one_finished_request`).
pub struct Finished {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
    pub e2e_secs: f64,
    pub streaming: bool,
}

/// `engine_type` (`DisaggregationMode.to_engine_type`).
fn engine_type(mode: Mode) -> &'static str {
    match mode {
        Mode::Null => "unified",
        Mode::Prefill => "prefill",
        Mode::Decode => "decode",
    }
}

impl SimMetrics {
    pub fn new(
        model_name: &str,
        version: SglangVersion,
        spec: Option<&Speculative>,
        mode: Mode,
    ) -> prometheus::Result<SimMetrics> {
        let registry = Registry::new();
        let engine = engine_type(mode);
        let new_api = version == SglangVersion::V0_5_23;
        let scheduler = |name: &str, help: &str| {
            Opts::new(name, help)
                .const_label("model_name", model_name)
                .const_label("engine_type", engine)
                .const_label("tp_rank", "0")
                .const_label("pp_rank", "0")
                .const_label("moe_ep_rank", "0")
        };
        let tokenizer = |name: &str, help: &str| {
            let opts = Opts::new(name, help).const_label("model_name", model_name);
            if new_api {
                opts.const_label("engine_type", engine)
            } else {
                opts
            }
        };
        let streamed: &[&str] = if new_api { &["is_streaming"] } else { &[] };
        let register = |c: Box<dyn Collector>| registry.register(c);
        let counter_vec = |opts: Opts, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(opts, labels)?;
            register(Box::new(c.clone()))?;
            Ok(c)
        };
        let counter = |opts: Opts| -> prometheus::Result<IntCounter> {
            let c = IntCounter::with_opts(opts)?;
            register(Box::new(c.clone()))?;
            Ok(c)
        };
        let histogram = |opts: Opts, labels: &[&str]| -> prometheus::Result<HistogramVec> {
            let h = HistogramVec::new(
                HistogramOpts::from(opts).buckets(LATENCY_BUCKETS.to_vec()),
                labels,
            )?;
            register(Box::new(h.clone()))?;
            Ok(h)
        };
        let requests = counter_vec(
            tokenizer("sglang:num_requests_total", "Number of requests processed."),
            streamed,
        )?;
        let aborted = counter(tokenizer(
            "sglang:num_aborted_requests_total",
            "Number of requests aborted.",
        ))?;
        // Not SGLang metrics: let tests see what really reached the sim.
        let sim_opts =
            |name: &str, help: &str| Opts::new(name, help).const_label("model_name", model_name);
        let abort_requests = counter(sim_opts(
            "sim_abort_requests_received_total",
            "POST /abort_request calls with a rid or abort_all",
        ))?;
        let received = counter(sim_opts(
            "sim_requests_received_total",
            "Generation requests that reached the sim, counted on arrival",
        ))?;
        let prompt_tokens = counter_vec(
            tokenizer(
                "sglang:prompt_tokens_total",
                "Number of prefill tokens processed.",
            ),
            streamed,
        )?;
        let generation_tokens = counter_vec(
            tokenizer(
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
            ),
            streamed,
        )?;
        let cached_tokens = counter_vec(
            tokenizer(
                "sglang:cached_tokens_total",
                "Number of cached prompt tokens by source (device/host/storage).",
            ),
            &["cache_source"],
        )?;
        let ttft = histogram(
            tokenizer(
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
            ),
            streamed,
        )?;
        let itl = histogram(
            tokenizer(
                "sglang:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
            ),
            &[],
        )?
        .with_label_values(&[] as &[&str]);
        let e2e = histogram(
            tokenizer(
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
            ),
            streamed,
        )?;
        let gauge_defs: [(&str, &str, ReadLoad); 6] = [
            (
                "sglang:num_running_reqs",
                "The number of running requests.",
                |l| l.num_running_reqs as f64,
            ),
            (
                "sglang:num_queue_reqs",
                "The number of requests in the waiting queue.",
                |l| l.num_queue_reqs as f64,
            ),
            (
                "sglang:num_used_tokens",
                "The number of used tokens.",
                |l| l.num_used_tokens as f64,
            ),
            ("sglang:token_usage", "The token usage.", |l| l.token_usage),
            ("sglang:cache_hit_rate", "The prefix cache hit rate.", |l| {
                l.cache_hit_rate
            }),
            (
                "sglang:max_total_num_tokens",
                "Maximum total number of tokens in the KV cache pool.",
                |l| l.max_total_num_tokens as f64,
            ),
        ];
        let mut gauges = Vec::new();
        for (name, help, read) in gauge_defs {
            let g = Gauge::with_opts(scheduler(name, help))?;
            register(Box::new(g.clone()))?;
            gauges.push((g, read));
        }
        let mut decode_defs: Vec<(&str, &str, ReadDecode)> = vec![
            (
                "sglang:gen_throughput",
                "Generation throughput (token/s) over the last 40 decode steps",
                |d, _, _| d.recent_tokens_per_s,
            ),
            (
                "sglang:spec_accept_length",
                "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)",
                |d, _, _| d.recent_accept_length,
            ),
            (
                "sglang:spec_accept_rate",
                "Speculative acceptance rate",
                spec_accept_rate,
            ),
        ];
        let mut spec_verify_calls = None;
        if version.has_extended_spec_metrics() {
            decode_defs.extend([
                (
                    "sglang:spec_num_steps",
                    "Currently active speculative_num_steps",
                    (|_, s, _| s.map_or(0.0, |s| s.num_steps as f64)) as ReadDecode,
                ),
                (
                    "sglang:spec_num_draft_tokens",
                    "Currently active speculative_num_draft_tokens",
                    |_, s, _| s.map_or(0.0, |s| s.num_draft_tokens as f64),
                ),
                // DSpark-only figures: zero for EAGLE, as SGLang reports them.
                (
                    "sglang:spec_cap_length",
                    "DSpark verify window",
                    |_, _, _| 0.0,
                ),
                (
                    "sglang:spec_block_accept_length",
                    "DSpark block accept length",
                    |_, _, _| 0.0,
                ),
            ]);
            spec_verify_calls = Some(counter(tokenizer(
                "sglang:spec_verify_calls_total",
                "Number of speculative decoding verification calls.",
            ))?);
        }
        let mut decode_gauges = Vec::new();
        for (name, help, read) in decode_defs {
            let g = Gauge::with_opts(scheduler(name, help))?;
            register(Box::new(g.clone()))?;
            decode_gauges.push((g, read));
        }
        Ok(SimMetrics {
            spec_verify_calls,
            decode_gauges,
            spec: spec.copied(),
            version,
            registry,
            requests,
            aborted,
            abort_requests,
            received,
            prompt_tokens,
            generation_tokens,
            cached_tokens,
            ttft,
            itl,
            e2e,
            gauges,
        })
    }

    /// The value of 0.5.23's `is_streaming` label (0.5.9 has none).
    fn streamed(&self, streaming: bool) -> &'static [&'static str] {
        match (self.version, streaming) {
            (SglangVersion::V0_5_9, _) => &[],
            (SglangVersion::V0_5_23, true) => &["true"],
            (SglangVersion::V0_5_23, false) => &["false"],
        }
    }

    pub fn first_token(&self, secs: f64, streaming: bool) {
        self.ttft
            .with_label_values(self.streamed(streaming))
            .observe(secs);
    }

    /// A request ended (finished, or aborted while running): SGLang's tokenizer counts it then.
    pub fn finished(&self, r: &Finished) {
        let labels = self.streamed(r.streaming);
        self.requests.with_label_values(labels).inc();
        self.prompt_tokens
            .with_label_values(labels)
            .inc_by(r.prompt_tokens as u64);
        self.generation_tokens
            .with_label_values(labels)
            .inc_by(r.completion_tokens as u64);
        if r.cached_tokens > 0 {
            self.cached_tokens
                .with_label_values(&["total"])
                .inc_by(r.cached_tokens as u64);
        }
        self.e2e.with_label_values(labels).observe(r.e2e_secs);
    }

    /// The text exposition, with the load gauges as the scheduler last reported them.
    pub fn render(&self, loads: &Reported) -> String {
        for (g, read) in &self.gauges {
            g.set(read(loads));
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl SimMetrics {
    /// A finished request's verify rounds, into `sglang:spec_verify_calls_total` (0.5.23, with
    /// speculation).
    pub fn finished_verify_rounds(&self, rounds: u64) {
        if let (Some(c), Some(_)) = (&self.spec_verify_calls, &self.spec) {
            c.inc_by(rounds);
        }
    }

    /// Sets the decode gauges (throughput, speculative acceptance) before a render.
    pub fn set_decode(&self, decode: &DecodeStats) {
        for (g, read) in &self.decode_gauges {
            g.set(read(decode, self.spec.as_ref(), self.version));
        }
    }
}

/// 0.5.9: accepted tokens (bonus included) over rounds × draft tokens; 0.5.23: accepted drafts
/// over proposed drafts (`scheduler_metrics_mixin.py` / `metrics_reporter.py`).
fn spec_accept_rate(d: &DecodeStats, spec: Option<&Speculative>, v: SglangVersion) -> f64 {
    let Some(s) = spec else {
        return 0.0;
    };
    let rounds = d.recent_rounds as f64;
    let (accepted, per_round) = if v.has_extended_spec_metrics() {
        (
            d.recent_accepted.saturating_sub(d.recent_rounds) as f64,
            s.num_draft_tokens.saturating_sub(1) as f64,
        )
    } else {
        (d.recent_accepted as f64, s.num_draft_tokens as f64)
    };
    if rounds * per_round > 0.0 {
        accepted / (rounds * per_round)
    } else {
        0.0
    }
}
