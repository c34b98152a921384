//! Data parallelism (`--dp-size N`): N engines behind one port, each with its own queue, KV pool
//! and radix cache, as SGLang's `DataParallelController` runs N schedulers. A request names its
//! rank (`data_parallel_rank`, 0.5.23's `routed_dp_rank`) or the controller picks one by
//! `--load-balance-method` (`managers/data_parallel_controller.py`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Deserialize;

use super::driver::Driver;
use super::engine::{DecodeStats, LoadSnapshot};
use super::pd::Mode;
use super::version::SglangVersion;

/// `--load-balance-method` (`LoadBalanceMethod`); `auto` resolves as `ServerArgs.
/// _handle_load_balance_method` does: `follow_bootstrap_room` on a prefill worker, else
/// `round_robin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalanceMethod {
    #[default]
    Auto,
    RoundRobin,
    FollowBootstrapRoom,
    TotalRequests,
    TotalTokens,
}

impl LoadBalanceMethod {
    pub fn resolve(self, mode: Mode) -> LoadBalanceMethod {
        match (self, mode) {
            (LoadBalanceMethod::Auto, Mode::Prefill) => LoadBalanceMethod::FollowBootstrapRoom,
            (LoadBalanceMethod::Auto, _) => LoadBalanceMethod::RoundRobin,
            // In a prefill worker the legacy `round_robin` means `follow_bootstrap_room`.
            (LoadBalanceMethod::RoundRobin, Mode::Prefill) => {
                LoadBalanceMethod::FollowBootstrapRoom
            }
            (m, _) => m,
        }
    }
}

/// The rank fields of a request body (`/generate` and the OpenAI routes alike).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct RankFields {
    data_parallel_rank: Option<i64>,
    routed_dp_rank: Option<i64>,
}

impl RankFields {
    /// Read leniently: a body that fails this parse fails the route's own parse anyway.
    pub fn of(body: &[u8]) -> RankFields {
        serde_json::from_slice(body).unwrap_or_default()
    }

    /// The rank this release reads: 0.5.9 knows only `data_parallel_rank`; 0.5.23 reads
    /// `routed_dp_rank` and takes `data_parallel_rank` as its deprecated alias.
    pub fn requested(self, version: SglangVersion) -> Option<i64> {
        match version {
            SglangVersion::V0_5_9 => self.data_parallel_rank,
            SglangVersion::V0_5_23 => self.routed_dp_rank.or(self.data_parallel_rank),
        }
    }
}

/// The ranks' engines and the controller's dispatch state.
pub struct Ranks {
    drivers: Vec<Arc<Driver>>,
    method: LoadBalanceMethod,
    round_robin: AtomicUsize,
}

impl Ranks {
    /// `drivers` is never empty (`--dp-size` is at least 1); `method` is already resolved.
    pub fn new(drivers: Vec<Arc<Driver>>, method: LoadBalanceMethod) -> Ranks {
        Ranks {
            drivers,
            method,
            round_robin: AtomicUsize::new(0),
        }
    }

    pub fn size(&self) -> usize {
        self.drivers.len()
    }

    /// The rank a request runs on, and its engine: the one it names (already checked by
    /// [`SglangVersion::check_dp_rank`]), else the controller's choice.
    pub fn dispatch(&self, requested: Option<i64>, room: Option<u64>) -> (usize, &Arc<Driver>) {
        let n = self.drivers.len().max(1);
        let rank = match requested.and_then(|r| usize::try_from(r).ok()) {
            Some(r) if r < n => r,
            _ => self.balanced(room),
        };
        let rank = rank.min(self.drivers.len().saturating_sub(1));
        (rank, &self.drivers[rank])
    }

    /// The resolved `--load-balance-method`.
    pub fn method(&self) -> LoadBalanceMethod {
        self.method
    }

    fn balanced(&self, room: Option<u64>) -> usize {
        let n = self.drivers.len().max(1);
        match self.method {
            LoadBalanceMethod::FollowBootstrapRoom => room.map_or(0, |r| (r % n as u64) as usize),
            LoadBalanceMethod::TotalRequests => {
                self.least_by(|l| (l.num_running_reqs + l.num_waiting_reqs, 0))
            }
            LoadBalanceMethod::TotalTokens => self.least_by(|l| {
                (
                    l.num_used_tokens + l.num_waiting_uncached_tokens,
                    l.num_running_reqs + l.num_waiting_reqs,
                )
            }),
            LoadBalanceMethod::RoundRobin | LoadBalanceMethod::Auto => {
                self.round_robin.fetch_add(1, Ordering::Relaxed) % n
            }
        }
    }

    /// `DPBudget.dispatch`: the first rank with the least load.
    fn least_by(&self, key: impl Fn(&LoadSnapshot) -> (usize, usize)) -> usize {
        (0..self.drivers.len())
            .min_by_key(|&i| key(&self.drivers[i].loads()))
            .unwrap_or(0)
    }

    /// Each rank's `/v1/loads` entry.
    pub fn rank_loads(&self) -> Vec<LoadSnapshot> {
        self.drivers
            .iter()
            .enumerate()
            .map(|(rank, d)| LoadSnapshot {
                dp_rank: rank,
                ..d.loads()
            })
            .collect()
    }

    /// All ranks together (the metrics and the single-rank routes): counts and capacities
    /// summed, rates recomputed or averaged.
    pub fn loads(&self) -> LoadSnapshot {
        let mut ranks = self.rank_loads().into_iter();
        let Some(mut sum) = ranks.next() else {
            return self.drivers[0].loads();
        };
        let mut hit_rates = sum.cache_hit_rate;
        for l in ranks {
            sum.num_running_reqs += l.num_running_reqs;
            sum.num_waiting_reqs += l.num_waiting_reqs;
            sum.num_waiting_uncached_tokens += l.num_waiting_uncached_tokens;
            sum.num_used_tokens += l.num_used_tokens;
            sum.max_total_num_tokens += l.max_total_num_tokens;
            sum.max_running_requests += l.max_running_requests;
            sum.num_cached_tokens += l.num_cached_tokens;
            sum.num_evictable_tokens += l.num_evictable_tokens;
            sum.total_prefill_uncached_tokens += l.total_prefill_uncached_tokens;
            sum.total_prefill_busy_us += l.total_prefill_busy_us;
            sum.total_decode_busy_us += l.total_decode_busy_us;
            sum.total_generated_tokens += l.total_generated_tokens;
            hit_rates += l.cache_hit_rate;
        }
        sum.dp_rank = 0;
        sum.token_usage = if sum.max_total_num_tokens == 0 {
            0.0
        } else {
            sum.num_used_tokens as f64 / sum.max_total_num_tokens as f64
        };
        sum.cache_hit_rate = hit_rates / self.drivers.len() as f64;
        sum
    }

    /// The load gauges every rank last reported, summed (`None` without `--enable-metrics`).
    pub fn reported_gauges(&self) -> Option<super::gauges::Reported> {
        let mut ranks = self.drivers.iter().map(|d| d.reported_gauges());
        let mut sum = ranks.next()??;
        for r in ranks {
            let r = r?;
            sum.num_running_reqs += r.num_running_reqs;
            sum.num_queue_reqs += r.num_queue_reqs;
            sum.num_used_tokens += r.num_used_tokens;
            sum.max_total_num_tokens += r.max_total_num_tokens;
            sum.cache_hit_rate += r.cache_hit_rate;
        }
        if self.drivers.len() > 1 {
            sum.cache_hit_rate /= self.drivers.len() as f64;
            sum.token_usage = if sum.max_total_num_tokens == 0 {
                0.0
            } else {
                sum.num_used_tokens as f64 / sum.max_total_num_tokens as f64
            };
        }
        Some(sum)
    }

    /// Rank 0's decode figures with the throughput of all ranks.
    pub fn decode_stats(&self) -> DecodeStats {
        let mut stats = self.drivers[0].decode_stats();
        stats.recent_tokens_per_s = self
            .drivers
            .iter()
            .map(|d| d.decode_stats().recent_tokens_per_s)
            .sum();
        stats
    }

    /// An abort reaches every rank (`DataParallelController.send_to_all_workers`).
    pub fn abort_by_rid(&self, rid_prefix: &str, all: bool) -> usize {
        self.drivers
            .iter()
            .map(|d| d.abort_by_rid(rid_prefix, all))
            .sum()
    }

    /// Flushed only if every rank is idle: a rank that is not refuses, as SGLang's does.
    pub fn flush_cache(&self) -> bool {
        if self
            .drivers
            .iter()
            .any(|d| d.loads().num_running_reqs + d.loads().num_waiting_reqs > 0)
        {
            return false;
        }
        self.drivers.iter().all(|d| d.flush_cache())
    }
}

impl SglangVersion {
    /// The front end's check of a named rank (a `ValueError`: 400, or an error event in a
    /// `/generate` stream). 0.5.23: `TokenizerManager.generate_request`. 0.5.9's HTTP server
    /// does not check (its controller indexes its list of ranks, and an out-of-range rank kills
    /// it); the simulator answers with the check of 0.5.9's `Engine.generate` instead.
    pub fn check_dp_rank(self, rank: Option<i64>, dp_size: usize) -> Result<(), String> {
        let Some(rank) = rank else { return Ok(()) };
        let n = dp_size as i64;
        match self {
            SglangVersion::V0_5_23 if n <= 1 && rank == 0 => Ok(()),
            SglangVersion::V0_5_23 if rank < 0 || rank >= n => {
                Err(format!("routed_dp_rank={rank} out of range [0, {n})"))
            }
            // Without DP there is no controller, and the scheduler ignores the field.
            SglangVersion::V0_5_9 if n <= 1 => Ok(()),
            SglangVersion::V0_5_9 if rank < 0 => {
                Err("data_parallel_rank must be non-negative".into())
            }
            SglangVersion::V0_5_9 if rank >= n => Err(format!(
                "data_parallel_rank must be in range [0, {}]",
                n - 1
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_reads_its_field() {
        let both = RankFields::of(br#"{"data_parallel_rank":1,"routed_dp_rank":2}"#);
        assert_eq!(both.requested(SglangVersion::V0_5_9), Some(1));
        assert_eq!(both.requested(SglangVersion::V0_5_23), Some(2));
        let alias = RankFields::of(br#"{"data_parallel_rank":3}"#);
        assert_eq!(alias.requested(SglangVersion::V0_5_23), Some(3));
        let new_only = RankFields::of(br#"{"routed_dp_rank":3}"#);
        assert_eq!(new_only.requested(SglangVersion::V0_5_9), None);
    }

    #[test]
    fn out_of_range_ranks_are_refused_in_each_release_words() {
        let v23 = SglangVersion::V0_5_23;
        assert_eq!(
            v23.check_dp_rank(Some(4), 4).unwrap_err(),
            "routed_dp_rank=4 out of range [0, 4)"
        );
        assert!(v23.check_dp_rank(Some(0), 1).is_ok());
        assert!(v23.check_dp_rank(Some(1), 1).is_err());
        assert!(v23.check_dp_rank(Some(3), 4).is_ok());
        let v9 = SglangVersion::V0_5_9;
        assert_eq!(
            v9.check_dp_rank(Some(4), 4).unwrap_err(),
            "data_parallel_rank must be in range [0, 3]"
        );
        assert!(v9.check_dp_rank(Some(-1), 4).is_err());
        assert!(v9.check_dp_rank(Some(7), 1).is_ok());
    }

    #[test]
    fn auto_follows_the_role() {
        use LoadBalanceMethod::*;
        assert_eq!(Auto.resolve(Mode::Null), RoundRobin);
        assert_eq!(Auto.resolve(Mode::Prefill), FollowBootstrapRoom);
        assert_eq!(RoundRobin.resolve(Mode::Prefill), FollowBootstrapRoom);
        assert_eq!(TotalTokens.resolve(Mode::Decode), TotalTokens);
    }
}
