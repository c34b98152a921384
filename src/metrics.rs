//! The gateway's Prometheus metrics, registered on a registry handed in (not a global), with
//! label values bounded: endpoint names, status codes, worker URLs from the registry, and the
//! `model` every series carries (one `Metrics` per configured model, on one registry; requests
//! refused before their model was known count under [`UNROUTED`]).

mod labels;
pub mod per_worker;
pub mod timer;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

pub use labels::{Endpoint, Stage};
pub use per_worker::WorkerSample;
pub use timer::RequestTimer;

/// The `model` label of what no configured model can be charged with, with several models (a
/// request refused before its model was looked up, or naming none of them).
pub const UNROUTED: &str = "none";

/// What one finished request adds to the counters.
pub struct Outcome {
    pub status: u16,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// Prompt tokens the routing policy expected the worker to have cached.
    pub predicted_cached: usize,
}

/// Latency histograms of one endpoint, resolved once so the hot path does no label lookups.
#[derive(Clone)]
pub struct LatencyHandles {
    pub ttft: Histogram,
    pub itl: Histogram,
    pub tpot: Histogram,
    pub e2e: Histogram,
}

pub struct Metrics {
    registry: Registry,
    latency: Vec<LatencyHandles>,
    stages: Vec<Histogram>,
    requests: IntCounterVec,
    pub prompt_tokens: IntCounter,
    pub completion_tokens: IntCounter,
    pub cached_tokens: IntCounter,
    pub client_aborts: IntCounter,
    /// Tokens workers generated after the client left, until our abort reached them.
    pub tokens_after_client_left: IntCounter,
    upstream_errors: IntCounterVec,
    picks: IntCounterVec,
    prediction_error: Histogram,
    pub prefix_index_tokens: prometheus::IntGauge,
    pub tokenizer_cache_bytes: prometheus::IntGauge,
    pub retries: IntCounter,
    pub migrations: IntCounterVec,
    /// Workers added or removed by service discovery.
    pub discovery_changes: IntCounterVec,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0,
];
const STAGE_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 5.0,
];

impl Metrics {
    pub fn new(registry: Registry, model: &str, policy: &str) -> prometheus::Result<Metrics> {
        let hist = |name: &str,
                    help: &str,
                    buckets: &[f64],
                    labels: &[&str]|
         -> prometheus::Result<HistogramVec> {
            let h = HistogramVec::new(
                HistogramOpts::new(name, help)
                    .const_label("model", model)
                    .buckets(buckets.to_vec()),
                labels,
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok(h)
        };
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::with_opts(Opts::new(name, help).const_label("model", model))?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let ttft = hist(
            "switchboard_time_to_first_token_seconds",
            "Request start to first generated token sent",
            LATENCY_BUCKETS,
            &["endpoint"],
        )?;
        let itl = hist(
            "switchboard_inter_token_latency_seconds",
            "Gap between consecutive tokens, one sample per token",
            LATENCY_BUCKETS,
            &["endpoint"],
        )?;
        let tpot = hist(
            "switchboard_time_per_output_token_seconds",
            "(E2E - TTFT) / (tokens - 1), one sample per request",
            LATENCY_BUCKETS,
            &["endpoint"],
        )?;
        let e2e = hist(
            "switchboard_e2e_request_latency_seconds",
            "Request start to the end of the response stream",
            LATENCY_BUCKETS,
            &["endpoint"],
        )?;
        let latency = Endpoint::ALL
            .iter()
            .map(|e| {
                let l = [e.label()];
                LatencyHandles {
                    ttft: ttft.with_label_values(&l),
                    itl: itl.with_label_values(&l),
                    tpot: tpot.with_label_values(&l),
                    e2e: e2e.with_label_values(&l),
                }
            })
            .collect();
        let stage = hist(
            "switchboard_stage_duration_seconds",
            "Time spent in each gateway stage",
            STAGE_BUCKETS,
            &["stage"],
        )?;
        let stages = Stage::ALL
            .iter()
            .map(|s| stage.with_label_values(&[s.label()]))
            .collect();
        let requests = IntCounterVec::new(
            Opts::new(
                "switchboard_requests_total",
                "Requests by endpoint and HTTP status",
            )
            .const_label("model", model),
            &["endpoint", "status"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        let upstream_errors = IntCounterVec::new(
            Opts::new(
                "switchboard_upstream_errors_total",
                "Worker failures by kind",
            )
            .const_label("model", model),
            &["kind"],
        )?;
        registry.register(Box::new(upstream_errors.clone()))?;
        let picks = IntCounterVec::new(
            Opts::new(
                "switchboard_route_picks_total",
                "Routing decisions by worker",
            )
            .const_label("model", model)
            .const_label("policy", policy),
            &["worker"],
        )?;
        registry.register(Box::new(picks.clone()))?;
        let prediction_error = Histogram::with_opts(
            HistogramOpts::new(
                "switchboard_cache_prediction_error_tokens",
                "Worker-reported cached tokens minus the routing policy's prediction, per request",
            )
            .const_label("model", model)
            .const_label("policy", policy)
            .buckets(vec![
                -4096.0, -1024.0, -256.0, -64.0, -16.0, -1.0, 0.0, 1.0, 16.0, 64.0, 256.0, 1024.0,
                4096.0,
            ]),
        )?;
        registry.register(Box::new(prediction_error.clone()))?;
        let prefix_index_tokens = prometheus::IntGauge::with_opts(
            Opts::new(
                "switchboard_prefix_index_tokens",
                "Tokens held by the routing prefix index",
            )
            .const_label("model", model),
        )?;
        registry.register(Box::new(prefix_index_tokens.clone()))?;
        let tokenizer_cache_bytes = prometheus::IntGauge::with_opts(
            Opts::new(
                "switchboard_tokenizer_cache_bytes",
                "Estimated bytes held by the tokenizer's piece cache (bounded at 32 MiB)",
            )
            .const_label("model", model),
        )?;
        registry.register(Box::new(tokenizer_cache_bytes.clone()))?;
        let retries = IntCounter::with_opts(
            Opts::new(
                "switchboard_retries_total",
                "Requests re-sent to another worker before any byte reached the client",
            )
            .const_label("model", model),
        )?;
        registry.register(Box::new(retries.clone()))?;
        let migrations = IntCounterVec::new(Opts::new("switchboard_migrations_total", "Generations whose worker failed mid-stream, by whether another worker continued them").const_label("model", model), &["outcome"])?;
        registry.register(Box::new(migrations.clone()))?;
        let discovery_changes = IntCounterVec::new(
            Opts::new(
                "switchboard_discovery_changes_total",
                "Workers added or removed by Kubernetes service discovery",
            )
            .const_label("model", model),
            &["change"],
        )?;
        registry.register(Box::new(discovery_changes.clone()))?;
        Ok(Metrics {
            retries,
            migrations,
            discovery_changes,
            picks,
            prediction_error,
            prefix_index_tokens,
            tokenizer_cache_bytes,
            latency,
            stages,
            requests,
            prompt_tokens: counter(
                "switchboard_prompt_tokens_total",
                "Prompt tokens sent to workers",
            )?,
            completion_tokens: counter(
                "switchboard_completion_tokens_total",
                "Tokens generated for clients",
            )?,
            tokens_after_client_left: counter(
                "switchboard_tokens_after_client_left_total",
                "Tokens workers generated after the client left, until the abort reached them",
            )?,
            cached_tokens: counter(
                "switchboard_cached_tokens_total",
                "Prompt tokens the workers served from their prefix cache",
            )?,
            client_aborts: counter(
                "switchboard_client_aborts_total",
                "Requests whose client went away before the end",
            )?,
            upstream_errors,
            registry,
        })
    }

    pub fn latency(&self, endpoint: Endpoint) -> &LatencyHandles {
        &self.latency[endpoint as usize]
    }

    pub fn stage(&self, stage: Stage, seconds: f64) {
        self.stages[stage as usize].observe(seconds);
    }

    pub fn request_done(&self, endpoint: Endpoint, status: u16) {
        self.requests
            .with_label_values(&[endpoint.label(), status_label(status)])
            .inc();
    }

    /// A worker left the set: its picks go too, so a fleet that changes does not grow the
    /// scrape forever (a worker added again starts from zero; its other series are written
    /// from the live workers at scrape time, `per_worker`).
    pub fn forget_worker(&self, worker_url: &str) {
        let _ = self.picks.remove_label_values(&[worker_url]);
    }

    pub fn pick(&self, worker_url: &str) {
        self.picks.with_label_values(&[worker_url]).inc();
    }

    /// How far the routing policy's cache prediction was from what the worker reported.
    pub fn cache_prediction(&self, predicted: usize, reported: u64) {
        self.prediction_error
            .observe(reported as f64 - predicted as f64);
    }

    /// Everything observed once, when a request's response really ended (whatever the route).
    pub fn request_ended(&self, endpoint: Endpoint, timer: &RequestTimer, o: Outcome) {
        if o.status < 300 {
            self.cache_prediction(o.predicted_cached, o.cached_tokens);
        }
        timer.finish(self.latency(endpoint));
        self.request_done(endpoint, o.status);
        self.prompt_tokens.inc_by(o.prompt_tokens);
        self.completion_tokens.inc_by(o.completion_tokens);
        self.cached_tokens.inc_by(o.cached_tokens);
    }

    pub fn upstream_error(&self, label: &'static str) {
        self.upstream_errors.with_label_values(&[label]).inc();
    }

    /// Where other layers register their own series (rendered with these).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The registry's series, then the workers' scrape-time series (`per_worker`).
    pub fn render(&self, workers: &[WorkerSample]) -> String {
        use prometheus::Encoder;
        let mut out = Vec::new();
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out);
        let mut text = String::from_utf8(out).unwrap_or_default();
        per_worker::render(workers, &mut text);
        text
    }
}

/// Status codes as static labels: no allocation per request, and a bounded label set.
fn status_label(status: u16) -> &'static str {
    match status {
        200 => "200",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        408 => "408",
        413 => "413",
        415 => "415",
        429 => "429",
        499 => "499",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        s if s < 300 => "2xx",
        s if s < 500 => "4xx",
        _ => "5xx",
    }
}
