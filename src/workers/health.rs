//! Active health checks: `GET /health` (a gRPC worker: its `HealthCheck` RPC) on every worker
//! that has not served a first token since the last interval. Thresholds keep a flapping worker out: two
//! failures in a row exclude a worker, and once excluded it needs two successes in a row to
//! come back (a new worker needs one).
//!
//! An idle worker that keeps passing is probed less and less often (every 2, 4, then
//! [`IDLE_PROBE_CEILING`] intervals): at thousands of workers each probe is a connection the
//! worker's Python front end answers. Anything that could mean trouble (a failed probe, the
//! breaker not closed, requests in flight without a first token) brings it back to every
//! interval, and a request that reaches a dead worker fails before its first byte and is
//! retried elsewhere, so the longer gap costs no client anything.
//!
//! A load poll's answer does not stand in for a probe: a worker that is draining or warming up
//! (SGLang's `/health` 503, a gRPC servicer's NOT_SERVING) still reports its load.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::breaker::BreakerState;
use super::{Registry, Worker, WorkerId};
use crate::upstream::Client;

const FAILS_TO_EXCLUDE: u32 = 2;
const SUCCESSES_TO_READMIT: u32 = 2;
/// The most intervals between two probes of an idle healthy worker.
const IDLE_PROBE_CEILING: u32 = 6;
/// The most different reasons a worker that never came up is logged with.
const REASONS_TO_TELL: u8 = 4;

/// The probe history of one worker.
#[derive(Debug, Default, Clone, Copy)]
struct History {
    fails: u32,
    successes: u32,
    /// Excluded after having been healthy: re-admission needs more than one good answer.
    was_excluded: bool,
    /// How many times a worker that never passed a check has said why (refused, TLS,
    /// status), and a hash of the last reason said.
    reasons_told: u8,
    last_reason_told: u64,
    /// Intervals between this worker's probes while it is idle and passing, and the
    /// intervals left before the next one.
    period: u32,
    wait: u32,
}

impl History {
    /// Records a probe and returns whether the worker should take traffic.
    fn record(&mut self, ok: bool, healthy_now: bool) -> bool {
        if ok {
            self.fails = 0;
            self.successes += 1;
        } else {
            self.successes = 0;
            self.fails += 1;
        }
        let healthy = if healthy_now {
            self.fails < FAILS_TO_EXCLUDE
        } else {
            self.successes
                >= if self.was_excluded {
                    SUCCESSES_TO_READMIT
                } else {
                    1
                }
        };
        if healthy_now && !healthy {
            self.was_excluded = true;
        }
        healthy
    }

    /// Whether an idle healthy worker is due a probe at this tick; `quiet` says nothing
    /// suggests trouble (see the module's comment). Counts the tick down otherwise.
    fn due(&mut self, quiet: bool) -> bool {
        if !quiet || self.wait == 0 {
            return true;
        }
        self.wait -= 1;
        false
    }

    /// After a probe: a pass while quiet lengthens the period, anything else resets it.
    fn schedule(&mut self, passed_quietly: bool) {
        self.period = if passed_quietly {
            (self.period * 2).clamp(1, IDLE_PROBE_CEILING)
        } else {
            1
        };
        self.wait = self.period - 1;
    }

    /// Whether a worker that is not ready yet should log why: once per change of reason, so
    /// a transient first failure (refused while the worker starts, a probe that timed out)
    /// does not hide the lasting one (an untrusted certificate); at most
    /// [`REASONS_TO_TELL`] times, so reasons that alternate do not fill the log.
    fn tell_why_not_ready(&mut self, reason: &str) -> bool {
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            reason.hash(&mut h);
            h.finish()
        };
        if self.was_excluded
            || self.reasons_told >= REASONS_TO_TELL
            || (self.reasons_told > 0 && hash == self.last_reason_told)
        {
            return false;
        }
        self.reasons_told += 1;
        self.last_reason_told = hash;
        true
    }
}

/// One immediate probe of a newly added worker, so it takes traffic without waiting a whole interval.
pub async fn check_now(client: &Client, registry: &Registry, worker: &Worker) {
    if check(client, worker, Duration::from_secs(5)).await.is_ok() {
        super::dp::learn(client, registry, worker).await;
        worker.set_healthy(true);
    }
}

/// One `/health` probe (`HealthCheck` over gRPC); the error says why it failed.
async fn check(client: &Client, worker: &Worker, timeout: Duration) -> Result<(), String> {
    if worker.origin.is_grpc() {
        return crate::upstream::grpc::health(client.grpc(), &worker.origin, timeout).await;
    }
    match client.get(&worker.origin, "/health", timeout).await {
        Ok((status, _)) if status.is_success() => Ok(()),
        Ok((status, _)) => Err(format!("/health answered {status}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Every interval, probes each worker that has not shown it works since the last one: a
/// healthy worker that gave a client its first token within the interval counts as passing
/// (health folded into traffic), so a busy fleet is not also asked `/health`. Probes run
/// concurrently: one slow worker does not delay the others.
pub fn spawn(
    registry: Arc<Registry>,
    client: Client,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut history: HashMap<WorkerId, History> = HashMap::new();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let timeout = interval.min(Duration::from_secs(5));
        loop {
            tick.tick().await;
            let workers = registry.snapshot();
            if history.len() > workers.len() {
                let live: HashSet<WorkerId> = workers.iter().map(|w| w.id).collect();
                history.retain(|id, _| live.contains(id));
            }
            // Per worker: `None` skips this tick, else whether it was quiet and how it did.
            let probes = workers.iter().map(|w| {
                let h = history.entry(w.id).or_default();
                let quiet = w.is_healthy()
                    && w.in_flight() == 0
                    && w.breaker().state() == BreakerState::Closed;
                let served = w.is_healthy() && w.served_within(interval);
                let due = served || h.due(quiet);
                let client = &client;
                async move {
                    match (served, due) {
                        (true, _) => Some((false, Ok(()))),
                        (false, true) => Some((quiet, check(client, w, timeout).await)),
                        (false, false) => None,
                    }
                }
            });
            let results = futures_util::future::join_all(probes).await;
            for (w, result) in workers.iter().zip(results) {
                let Some((quiet, result)) = result else {
                    continue;
                };
                let h = history.entry(w.id).or_default();
                h.schedule(quiet && result.is_ok());
                let healthy = h.record(result.is_ok(), w.is_healthy());
                let reason = result.err().unwrap_or_default();
                if healthy != w.is_healthy() {
                    if healthy {
                        // Its data-parallel ranks are known before it takes traffic (a
                        // restarted worker may have another `dp_size`).
                        super::dp::learn(&client, &registry, w).await;
                        tracing::info!(worker = %w.url(), "worker healthy");
                    } else {
                        tracing::warn!(worker = %w.url(), error = %reason, "worker failed its health checks; excluded");
                    }
                    w.set_healthy(healthy);
                } else if !healthy && h.tell_why_not_ready(&reason) {
                    // Without this a worker that never comes up (wrong port, untrusted
                    // certificate) would fail silently.
                    tracing::warn!(worker = %w.url(), error = %reason, "worker not healthy yet");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ticks at which a worker is probed over `ticks`, passing every probe while quiet.
    fn probed_ticks(h: &mut History, ticks: std::ops::Range<u32>, quiet: bool) -> Vec<u32> {
        ticks
            .filter(|_| {
                let due = h.due(quiet);
                if due {
                    h.schedule(quiet);
                }
                due
            })
            .collect()
    }

    #[test]
    fn an_idle_passing_worker_is_probed_less_often_up_to_the_ceiling() {
        let mut h = History::default();
        assert_eq!(
            probed_ticks(&mut h, 0..40, true),
            [0, 1, 3, 7, 13, 19, 25, 31, 37]
        );
        // Trouble (in flight without a first token, breaker not closed) probes every tick.
        assert_eq!(probed_ticks(&mut h, 40..44, false), [40, 41, 42, 43]);
        // And a quiet worker starts over from the shortest period.
        assert_eq!(probed_ticks(&mut h, 44..52, true), [44, 46, 50]);
    }

    #[test]
    fn a_failed_probe_brings_the_worker_back_to_every_interval() {
        let mut h = History::default();
        probed_ticks(&mut h, 0..20, true);
        assert_eq!(h.period, IDLE_PROBE_CEILING);
        h.schedule(false);
        assert!(h.due(true), "the next tick probes again");
    }

    #[test]
    fn a_worker_not_ready_says_why_again_when_the_reason_changes() {
        let mut h = History::default();
        let told: Vec<bool> = ["refused", "refused", "timed out", "CertificateRequired"]
            .into_iter()
            .chain(["CertificateRequired"; 3])
            .map(|reason| h.tell_why_not_ready(reason))
            .collect();
        assert_eq!(told, [true, false, true, true, false, false, false]);
        // Alternating reasons are told only up to the cap.
        let told = ["a", "b", "a", "b", "a", "b"]
            .into_iter()
            .filter(|reason| h.tell_why_not_ready(reason))
            .count();
        assert_eq!(told, usize::from(REASONS_TO_TELL) - 3);
    }

    #[test]
    fn thresholds_keep_a_flapping_worker_out() {
        let mut h = History::default();
        let mut healthy = false;
        for (ok, expect) in [
            (true, true),
            (false, true),
            (true, true),
            (false, true),
            (false, false),
            (true, false),
            (true, true),
        ] {
            healthy = h.record(ok, healthy);
            assert_eq!(healthy, expect);
        }
        // Alternating answers never bring an excluded worker back.
        let mut h = History {
            was_excluded: true,
            ..Default::default()
        };
        let mut healthy = false;
        for ok in [true, false, true, false, true, false] {
            healthy = h.record(ok, healthy);
            assert!(!healthy);
        }
    }
}
