//! Routing settings (`switchboard serve` flags, flattened into `ServeConfig`).
//!
//! `cache_aware`'s flags keep SMG's names, meanings and (Rust `smg` binary) defaults so an SMG
//! command line carries over; the one difference is that sizes count tokens, not characters.

use clap::{Args, ValueEnum};

use crate::workers::kv_events::advertised::EndpointOverride;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum PolicyKind {
    RoundRobin,
    Random,
    PowerOfTwo,
    /// SMG's prefix-tree policy: stick to the deepest match unless that worker is overloaded.
    CacheAware,
    /// Session key (or first prompt page) on a hash ring, with bounded load.
    ConsistentHash,
    /// Lowest estimated cost: uncached prefill + queued prefill + decode load.
    PrefixCost,
}

impl PolicyKind {
    /// The flag value, e.g. `round_robin`.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Args)]
pub struct RoutingConfig {
    /// How workers are chosen.
    #[arg(long, value_enum, default_value = "prefix_cost")]
    pub policy: PolicyKind,

    /// Tokens per page of the prefix index: prompts match in whole pages (SGLang's --page-size).
    #[arg(long, alias = "block-size", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub prefix_page_size: u64,
    /// Token budget of the prefix index ((page, worker) entries × page size), evicted by CLOCK
    /// (approximately least recently used).
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub prefix_index_max_tokens: usize,

    /// cache_aware: a prompt whose best match covers more than this fraction of it is a hit.
    #[arg(long, default_value_t = 0.3)]
    pub cache_threshold: f64,
    /// cache_aware: a hit spills to the least-loaded worker when its worker's in-flight count
    /// exceeds the mean by more than this many requests (and by --balance-rel-threshold).
    #[arg(long, default_value_t = 64)]
    pub balance_abs_threshold: usize,
    /// cache_aware: ... and exceeds the mean times this factor.
    #[arg(long, default_value_t = 1.5)]
    pub balance_rel_threshold: f64,
    /// cache_aware: seconds between sweeps evicting the index down to --max-tree-size (0 =
    /// evict on every insert). Between sweeps the index may grow to twice its size.
    #[arg(long, alias = "eviction-interval", default_value_t = 120)]
    pub eviction_interval_secs: u64,
    /// cache_aware: index budget in tokens (SMG counts characters); default
    /// --prefix-index-max-tokens.
    #[arg(long)]
    pub max_tree_size: Option<usize>,

    /// consistent_hash: a key leaves its worker when that worker's in-flight count would exceed
    /// this factor times the mean.
    #[arg(long, default_value_t = 1.25)]
    pub hash_load_factor: f64,

    /// prefix_cost: weight of each prompt token the worker must prefill (not cached there).
    #[arg(long, default_value_t = 1.0)]
    pub prefill_weight: f64,
    /// prefix_cost: prefill-token equivalent of each request decoding on the worker.
    #[arg(long, default_value_t = 128.0)]
    pub decode_weight: f64,

    /// KV events: follow each worker whose /server_info advertises a publisher and route it on
    /// its exact cache contents (`auto`), or never (`off`).
    #[arg(long, value_enum, default_value = "auto")]
    pub kv_events: KvEventsMode,
    /// `WORKER_URL=tcp://HOST:PORT[,tcp://HOST:REPLAY_PORT]`: follow this publisher (and replay
    /// socket) for that worker instead of what it advertises (a `*` host is the worker's).
    /// Repeatable.
    #[arg(long = "kv-events-endpoint", value_parser = EndpointOverride::parse)]
    pub kv_events_endpoints: Vec<EndpointOverride>,
    /// Cap on blocks in the exact index over all workers (each worker's view is also bounded by
    /// its reported KV capacity).
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub kv_events_max_blocks: usize,
    /// Seconds a worker's view rebuilds from live events after it lost some (the approximate
    /// index routes that worker meanwhile).
    #[arg(long, default_value_t = 30)]
    pub kv_events_rebuild_secs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum KvEventsMode {
    Auto,
    Off,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            policy: PolicyKind::PrefixCost,
            prefix_page_size: 16,
            prefix_index_max_tokens: 4 * 1024 * 1024,
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval_secs: 120,
            max_tree_size: None,
            hash_load_factor: 1.25,
            prefill_weight: 1.0,
            decode_weight: 128.0,
            kv_events: KvEventsMode::Auto,
            kv_events_endpoints: Vec::new(),
            kv_events_max_blocks: 4 * 1024 * 1024,
            kv_events_rebuild_secs: 30,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        routing: RoutingConfig,
    }

    #[test]
    fn clap_defaults_match_default_impl() {
        let parsed = Cli::parse_from(["x"]).routing;
        assert_eq!(
            format!("{parsed:?}"),
            format!("{:?}", RoutingConfig::default())
        );
        let smg = Cli::parse_from([
            "x",
            "--policy",
            "cache_aware",
            "--block-size",
            "32",
            "--eviction-interval",
            "60",
        ])
        .routing;
        assert_eq!(smg.policy, PolicyKind::CacheAware);
        assert_eq!((smg.prefix_page_size, smg.eviction_interval_secs), (32, 60));
        assert!(Cli::try_parse_from(["x", "--prefix-page-size", "0"]).is_err());
    }
}
