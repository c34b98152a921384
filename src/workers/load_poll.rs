//! Polling each worker's own load report: SGLang's `/v1/loads` (0.5.x), falling back to the
//! deprecated `/get_load` list, then to Prometheus gauges on `/metrics` (SGLang's or
//! llama.cpp's); engines with none of them keep zeros and are routed on the gateway's own
//! bookings alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::task::JoinSet;

use super::{EngineLoad, Registry, Worker, WorkerId};
use crate::upstream::Client;

#[derive(Deserialize)]
struct Loads {
    loads: Vec<RankLoad>,
}

#[derive(Deserialize, Default)]
struct RankLoad {
    #[serde(default)]
    num_running_reqs: u64,
    #[serde(default)]
    num_waiting_reqs: u64,
    #[serde(default)]
    num_waiting_uncached_tokens: u64,
}

#[derive(Deserialize)]
struct LegacyLoad {
    #[serde(default)]
    num_reqs: u64,
    #[serde(default)]
    num_waiting_reqs: u64,
    #[serde(default)]
    num_tokens: u64,
}

/// Parses either shape; data-parallel ranks are summed.
pub fn parse(v1_loads: Option<&[u8]>, get_load: Option<&[u8]>) -> Option<EngineLoad> {
    if let Some(l) = v1_loads.and_then(|b| serde_json::from_slice::<Loads>(b).ok()) {
        return Some(
            l.loads
                .iter()
                .fold(EngineLoad::default(), |acc, r| EngineLoad {
                    running_requests: acc.running_requests + r.num_running_reqs,
                    waiting_requests: acc.waiting_requests + r.num_waiting_reqs,
                    waiting_uncached_tokens: acc.waiting_uncached_tokens
                        + r.num_waiting_uncached_tokens,
                }),
        );
    }
    let ranks = get_load.and_then(|b| serde_json::from_slice::<Vec<LegacyLoad>>(b).ok())?;
    Some(
        ranks
            .iter()
            .fold(EngineLoad::default(), |acc, r| EngineLoad {
                running_requests: acc.running_requests
                    + r.num_reqs.saturating_sub(r.num_waiting_reqs),
                waiting_requests: acc.waiting_requests + r.num_waiting_reqs,
                // 0.5.9 reports used KV plus waiting prompt tokens together; the waiting part is unknown.
                waiting_uncached_tokens: acc.waiting_uncached_tokens
                    + if r.num_waiting_reqs > 0 {
                        r.num_tokens
                    } else {
                        0
                    },
            }),
    )
}

/// Where a worker's load report comes from; found once, then remembered (like SMG memoises its
/// 404s), so a worker without `/v1/loads` is not asked for it four times a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    V1Loads,
    GetLoad,
    Metrics,
    None,
}

/// Prometheus gauges that say the same: SGLang's own, or llama.cpp's.
pub fn parse_metrics(text: &str) -> Option<EngineLoad> {
    let sum = |names: &[&str]| -> Option<f64> {
        let mut found = None;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            if names.contains(&&line[..name_end]) {
                let v: f64 = line
                    .rsplit(' ')
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0.0);
                found = Some(found.unwrap_or(0.0) + v);
            }
        }
        found
    };
    let running = sum(&["sglang:num_running_reqs", "llamacpp:requests_processing"])?;
    let waiting = sum(&["sglang:num_queue_reqs", "llamacpp:requests_deferred"]).unwrap_or(0.0);
    Some(EngineLoad {
        running_requests: running as u64,
        waiting_requests: waiting as u64,
        waiting_uncached_tokens: 0,
    })
}

async fn poll(
    client: &Client,
    worker: &Worker,
    source: Source,
    timeout: Duration,
) -> Option<EngineLoad> {
    let body = |path: &'static str| async move {
        match client.get(&worker.origin, path, timeout).await {
            Ok((status, body)) if status.is_success() => Some(body),
            _ => None,
        }
    };
    match source {
        Source::V1Loads => parse(Some(&body("/v1/loads").await?), None),
        Source::GetLoad => parse(None, Some(&body("/get_load").await?)),
        Source::Metrics => parse_metrics(std::str::from_utf8(&body("/metrics").await?).ok()?),
        Source::None => None,
    }
}

/// Tries each source in turn; `None` when the worker reports its load nowhere.
async fn discover(
    client: &Client,
    worker: &Worker,
    timeout: Duration,
) -> (Source, Option<EngineLoad>) {
    for source in [Source::V1Loads, Source::GetLoad, Source::Metrics] {
        if let Some(load) = poll(client, worker, source, timeout).await {
            return (source, Some(load));
        }
    }
    (Source::None, None)
}

/// A worker's load source and how many polls of it failed in a row.
type SourceState = (Source, u32);

/// Polls one worker (looking for its source again after too many misses) and records what it
/// reports; returns the worker's new source state.
async fn poll_worker(
    client: Client,
    worker: Arc<Worker>,
    (source, misses): SourceState,
    timeout: Duration,
) -> SourceState {
    let (state, load) = if misses >= REDISCOVER_AFTER {
        let (found, load) = discover(&client, &worker, timeout).await;
        ((found, 0), load)
    } else {
        let load = poll(&client, &worker, source, timeout).await;
        // A source that stops answering (worker restarted as another version) is looked for
        // again after a few misses.
        let misses = if load.is_some() { 0 } else { misses + 1 };
        ((source, misses), load)
    };
    if let Some(load) = load {
        worker.set_engine_load(load);
    }
    state
}

/// Every tick, starts a poll of each healthy worker whose previous poll has finished. Polls run
/// concurrently, at most one per worker, and each records its figure when it lands: a worker
/// that stalls holds only its own poll, never the others' (nor the next tick).
pub fn spawn(
    registry: Arc<Registry>,
    client: Client,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut sources: HashMap<WorkerId, SourceState> = HashMap::new();
        let mut polls: JoinSet<SourceState> = JoinSet::new();
        let mut polling: HashMap<tokio::task::Id, WorkerId> = HashMap::new();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let timeout = interval.max(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let workers = registry.snapshot();
                    sources.retain(|id, _| workers.iter().any(|w| w.id == *id));
                    for w in workers.iter().filter(|w| w.is_healthy()) {
                        if polling.values().any(|id| *id == w.id) {
                            continue;
                        }
                        let state = sources
                            .get(&w.id)
                            .copied()
                            .unwrap_or((Source::None, REDISCOVER_AFTER));
                        let task = polls.spawn(poll_worker(client.clone(), Arc::clone(w), state, timeout));
                        polling.insert(task.id(), w.id);
                    }
                }
                Some(done) = polls.join_next_with_id() => {
                    let (task, state) = match done {
                        Ok((task, state)) => (task, Some(state)),
                        Err(e) => (e.id(), None),
                    };
                    if let (Some(id), Some(state)) = (polling.remove(&task), state) {
                        sources.insert(id, state);
                    }
                }
            }
        }
    })
}

/// Failed polls (or polls of a worker with no source) before the sources are tried again.
const REDISCOVER_AFTER: u32 = 40;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_shapes() {
        let v1 = br#"{"version":"0.5.23","loads":[{"num_running_reqs":3,"num_waiting_reqs":2,"num_waiting_uncached_tokens":700},{"num_running_reqs":1}]}"#;
        assert_eq!(
            parse(Some(v1), None),
            Some(EngineLoad {
                running_requests: 4,
                waiting_requests: 2,
                waiting_uncached_tokens: 700
            })
        );
        let legacy = br#"[{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":1,"num_tokens":900}]"#;
        assert_eq!(
            parse(None, Some(legacy)),
            Some(EngineLoad {
                running_requests: 4,
                waiting_requests: 1,
                waiting_uncached_tokens: 900
            })
        );
        assert_eq!(parse(Some(b"<html>"), Some(b"{}")), None);
    }

    #[test]
    fn reads_prometheus_gauges_of_sglang_and_llama_cpp() {
        let sglang = "# HELP x\nsglang:num_running_reqs{dp_rank=\"0\"} 3\nsglang:num_running_reqs{dp_rank=\"1\"} 2\nsglang:num_queue_reqs 4\n";
        assert_eq!(
            parse_metrics(sglang),
            Some(EngineLoad {
                running_requests: 5,
                waiting_requests: 4,
                waiting_uncached_tokens: 0
            })
        );
        let llama = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 1\n";
        assert_eq!(
            parse_metrics(llama),
            Some(EngineLoad {
                running_requests: 2,
                waiting_requests: 1,
                waiting_uncached_tokens: 0
            })
        );
        assert_eq!(parse_metrics("other_metric 1\n"), None);
    }
}
