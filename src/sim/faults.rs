//! Fault injection for the simulator, set by flags at start or changed at run time with
//! `POST /sim/faults` (tests use that to break a running worker).

use std::sync::RwLock;
use std::time::Instant;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Fraction of generation requests answered with HTTP 500 before any token (0.0–1.0).
    #[arg(long = "fault-error-rate", default_value_t = 0.0)]
    pub error_rate: f64,
    /// Reset the connection after streaming this many tokens of each request.
    #[arg(long = "fault-die-after-tokens")]
    pub die_after_tokens: Option<usize>,
    /// Stall each request for this many seconds once it has `--fault-stall-after-tokens` tokens.
    #[arg(long = "fault-stall-secs", default_value_t = 0.0)]
    pub stall_secs: f64,
    /// 0 stalls before the first token.
    #[arg(long = "fault-stall-after-tokens", default_value_t = 0)]
    pub stall_after_tokens: usize,
    /// `/health` and `/health_generate` take this long to answer.
    #[arg(long = "fault-slow-health-secs", default_value_t = 0.0)]
    pub slow_health_secs: f64,
    /// `/health` alternates between 200 and 503 every this many seconds (0 = steady).
    #[arg(long = "fault-flap-health-secs", default_value_t = 0.0)]
    pub flap_health_secs: f64,
    /// Accept TCP connections and close them at once, without an HTTP answer.
    #[arg(long = "fault-refuse-connections")]
    pub refuse_connections: bool,
    /// `/abort_request` takes effect this many seconds late (a busy scheduler), so the request
    /// keeps generating meanwhile.
    #[arg(long = "fault-abort-delay-secs", default_value_t = 0.0)]
    pub abort_delay_secs: f64,
    /// `--grpc-mode`: the readiness answer (`grpc.health.v1`) is NOT_SERVING, as while SGLang's
    /// servicer warms up or drains; the `HealthCheck` probe still passes.
    #[arg(long = "fault-grpc-not-serving")]
    pub grpc_not_serving: bool,
}

pub struct Faults {
    config: RwLock<FaultConfig>,
    since: Instant,
}

impl Faults {
    pub fn new(config: FaultConfig) -> Faults {
        Faults {
            config: RwLock::new(config),
            since: Instant::now(),
        }
    }

    pub fn get(&self) -> FaultConfig {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set(&self, config: FaultConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    pub fn refuse_connections(&self) -> bool {
        self.config
            .read()
            .map(|c| c.refuse_connections)
            .unwrap_or(false)
    }

    pub fn should_fail(&self) -> bool {
        let rate = self.get().error_rate;
        rate > 0.0 && rand::random::<f64>() < rate
    }

    /// Whether health is currently "down" under the flapping fault.
    pub fn health_down(&self) -> bool {
        let period = self.get().flap_health_secs;
        period > 0.0 && (self.since.elapsed().as_secs_f64() / period) as u64 % 2 == 1
    }
}
