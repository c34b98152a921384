//! The simulator's Prometheus metrics, under SGLang's own `sglang:*` names.

use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, Opts, Registry, TextEncoder};

use super::engine::{DecodeStats, LoadSnapshot, Speculative};
use super::version::SglangVersion;

/// Reads one gauge's value from a load snapshot at scrape time.
type ReadLoad = fn(&LoadSnapshot) -> f64;

pub struct SimMetrics {
    registry: Registry,
    pub requests: IntCounter,
    pub aborted: IntCounter,
    pub abort_requests: IntCounter,
    pub prompt_tokens: IntCounter,
    pub generation_tokens: IntCounter,
    pub cached_tokens: IntCounter,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    gauges: Vec<(prometheus::Gauge, ReadLoad)>,
    /// `sglang:spec_verify_calls_total` (0.5.23): verify rounds of finished requests.
    pub spec_verify_calls: Option<IntCounter>,
    decode_gauges: Vec<(prometheus::Gauge, ReadDecode)>,
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

impl SimMetrics {
    pub fn new(
        model_name: &str,
        version: SglangVersion,
        spec: Option<&Speculative>,
    ) -> prometheus::Result<SimMetrics> {
        let registry = Registry::new();
        let labelled =
            |name: &str, help: &str| Opts::new(name, help).const_label("model_name", model_name);
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::with_opts(labelled(name, help))?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let histogram = |name: &str, help: &str| -> prometheus::Result<Histogram> {
            let h = Histogram::with_opts(
                HistogramOpts::new(name, help)
                    .const_label("model_name", model_name)
                    .buckets(LATENCY_BUCKETS.to_vec()),
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let requests = counter("sglang:num_requests_total", "Generation requests received")?;
        let aborted = counter(
            "sglang:num_aborted_requests_total",
            "Requests aborted before they finished",
        )?;
        // Not an SGLang metric: lets tests see that a gateway really called /abort_request.
        let abort_requests = counter(
            "sim_abort_requests_received_total",
            "POST /abort_request calls with a rid or abort_all",
        )?;
        let prompt_tokens = counter("sglang:prompt_tokens_total", "Prompt tokens")?;
        let generation_tokens = counter("sglang:generation_tokens_total", "Generated tokens")?;
        let cached_tokens = counter(
            "sglang:cached_tokens_total",
            "Prompt tokens served from the prefix cache",
        )?;
        let ttft = histogram("sglang:time_to_first_token_seconds", "Time to first token")?;
        let itl = histogram("sglang:inter_token_latency_seconds", "Time between tokens")?;
        let e2e = histogram(
            "sglang:e2e_request_latency_seconds",
            "End-to-end request latency",
        )?;
        let gauge_defs: [(&str, &str, ReadLoad); 6] = [
            ("sglang:num_running_reqs", "Running requests", |l| {
                l.num_running_reqs as f64
            }),
            ("sglang:num_queue_reqs", "Waiting requests", |l| {
                l.num_waiting_reqs as f64
            }),
            ("sglang:num_used_tokens", "KV tokens in use", |l| {
                l.num_used_tokens as f64
            }),
            ("sglang:token_usage", "KV usage 0-1", |l| l.token_usage),
            ("sglang:cache_hit_rate", "Prefix cache hit rate", |l| {
                l.cache_hit_rate
            }),
            (
                "sglang:max_total_num_tokens",
                "KV capacity in tokens",
                |l| l.max_total_num_tokens as f64,
            ),
        ];
        let mut gauges = Vec::new();
        for (name, help, read) in gauge_defs {
            let g = prometheus::Gauge::with_opts(labelled(name, help))?;
            registry.register(Box::new(g.clone()))?;
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
            spec_verify_calls = Some(counter(
                "sglang:spec_verify_calls_total",
                "Number of speculative decoding verification calls",
            )?);
        }
        let mut decode_gauges = Vec::new();
        for (name, help, read) in decode_defs {
            let g = prometheus::Gauge::with_opts(labelled(name, help))?;
            registry.register(Box::new(g.clone()))?;
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
            prompt_tokens,
            generation_tokens,
            cached_tokens,
            ttft,
            itl,
            e2e,
            gauges,
        })
    }

    pub fn render(&self, loads: &LoadSnapshot) -> String {
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
