//! When SGLang's scheduler load gauges (`sglang:num_running_reqs`, `num_queue_reqs`,
//! `num_used_tokens`, `token_usage`, `cache_hit_rate`, `max_total_num_tokens`) change: only
//! when it logs stats, so a scrape reads the last report, not the live state.
//!
//! - after every prefill batch, with that batch's `cache_hit_rate` (hit tokens over hit + new);
//! - every `decode_log_interval` (40) decode batches; 0.5.9 then reports `cache_hit_rate` 0,
//!   0.5.23 keeps the last prefill's;
//! - while idle, every 30 s; 0.5.23 also at once when the running gauge disagrees with the
//!   (empty) running batch.
//!
//! Sources: 0.5.9 `managers/scheduler_metrics_mixin.py` (`log_prefill_stats`,
//! `log_decode_stats`), `scheduler_output_processor_mixin.py` (the `decode_log_interval`
//! check), `scheduler_runtime_checker_mixin.py::check_memory` (idle); 0.5.23
//! `managers/scheduler_components/metrics_reporter.py` (`_maybe_log_idle_metrics`).

use std::time::{Duration, Instant};

use super::engine::LoadSnapshot;
use super::version::SglangVersion;

/// SGLang's `--decode-log-interval` default.
pub const DECODE_LOG_INTERVAL: u64 = 40;
/// The idle check's period (`last_log_time + 30`).
pub const IDLE_LOG_PERIOD: Duration = Duration::from_secs(30);

/// The load gauges as last reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reported {
    pub num_running_reqs: usize,
    pub num_queue_reqs: usize,
    pub num_used_tokens: usize,
    pub token_usage: f64,
    pub cache_hit_rate: f64,
    pub max_total_num_tokens: usize,
}

/// The scheduler's stats logging, fed each engine step.
#[derive(Debug)]
pub struct GaugeCadence {
    version: SglangVersion,
    decode_batches: u64,
    reported: Reported,
    last_log: Instant,
}

impl GaugeCadence {
    pub fn new(version: SglangVersion, now: Instant) -> GaugeCadence {
        GaugeCadence {
            version,
            decode_batches: 0,
            reported: Reported::default(),
            last_log: now,
        }
    }

    pub fn reported(&self) -> Reported {
        self.reported
    }

    /// A prefill batch ran: `hit` prompt tokens came from the cache, `new` were computed.
    pub fn prefill(&mut self, loads: &LoadSnapshot, hit: usize, new: usize, now: Instant) {
        let total = hit + new;
        let rate = if total > 0 {
            hit as f64 / total as f64
        } else {
            0.0
        };
        self.log(loads, rate, now);
    }

    /// A decode batch ran; `loads` is asked for only when this batch logs.
    pub fn decode(&mut self, loads: impl FnOnce() -> LoadSnapshot, now: Instant) {
        self.decode_batches += 1;
        if !self.decode_batches.is_multiple_of(DECODE_LOG_INTERVAL) {
            return;
        }
        let rate = match self.version {
            SglangVersion::V0_5_9 => 0.0,
            SglangVersion::V0_5_23 => self.reported.cache_hit_rate,
        };
        self.log(&loads(), rate, now);
    }

    /// The scheduler's idle check, run continuously while nothing is scheduled: evaluated when
    /// someone looks (a scrape), which gives the same value.
    pub fn idle(&mut self, loads: &LoadSnapshot, now: Instant) {
        let stale_running = self.version == SglangVersion::V0_5_23
            && self.reported.num_running_reqs != loads.num_running_reqs;
        if stale_running || now.duration_since(self.last_log) > IDLE_LOG_PERIOD {
            self.log(loads, self.reported.cache_hit_rate, now);
        }
    }

    fn log(&mut self, loads: &LoadSnapshot, cache_hit_rate: f64, now: Instant) {
        self.reported = Reported {
            num_running_reqs: loads.num_running_reqs,
            num_queue_reqs: loads.num_waiting_reqs,
            num_used_tokens: loads.num_used_tokens,
            token_usage: loads.token_usage,
            cache_hit_rate,
            max_total_num_tokens: loads.max_total_num_tokens,
        };
        self.last_log = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(running: usize) -> LoadSnapshot {
        LoadSnapshot {
            dp_rank: 0,
            num_running_reqs: running,
            num_waiting_reqs: 0,
            num_waiting_uncached_tokens: 0,
            num_used_tokens: running * 10,
            max_total_num_tokens: 1000,
            max_running_requests: 8,
            token_usage: running as f64 / 100.0,
            cache_hit_rate: 0.9,
            num_cached_tokens: 0,
            num_evictable_tokens: 0,
            total_prefill_uncached_tokens: 0,
            total_prefill_busy_us: 0.0,
            total_decode_busy_us: 0.0,
            total_generated_tokens: 0,
        }
    }

    #[test]
    fn prefill_reports_its_batch_and_decode_every_fortieth_batch() {
        for (version, rate_after_decode) in
            [(SglangVersion::V0_5_9, 0.0), (SglangVersion::V0_5_23, 0.25)]
        {
            let t0 = Instant::now();
            let mut c = GaugeCadence::new(version, t0);
            c.prefill(&loads(2), 1, 3, t0);
            assert_eq!(c.reported().num_running_reqs, 2);
            assert_eq!(c.reported().cache_hit_rate, 0.25, "hit / (hit + new)");
            for _ in 1..DECODE_LOG_INTERVAL {
                c.decode(|| loads(5), t0);
            }
            assert_eq!(c.reported().num_running_reqs, 2, "39 decodes: stale");
            c.decode(|| loads(5), t0);
            assert_eq!(c.reported().num_running_reqs, 5);
            assert_eq!(c.reported().cache_hit_rate, rate_after_decode);
        }
    }

    #[test]
    fn idle_refreshes_after_30_s_or_at_once_on_0_5_23_when_running_is_stale() {
        for (version, at_once) in [
            (SglangVersion::V0_5_9, false),
            (SglangVersion::V0_5_23, true),
        ] {
            let t0 = Instant::now();
            let mut c = GaugeCadence::new(version, t0);
            c.prefill(&loads(3), 0, 5, t0);
            c.idle(&loads(0), t0 + Duration::from_secs(1));
            assert_eq!(c.reported().num_running_reqs == 0, at_once, "{version:?}");
            c.idle(&loads(0), t0 + Duration::from_secs(31));
            assert_eq!(c.reported().num_running_reqs, 0);
        }
    }
}
