//! Polling each worker's own load report: SGLang's `/v1/loads` (0.5.x; 0.5.9's lacks waiting
//! tokens, which then come from its `/get_load`), else the deprecated `/get_load` list, else
//! Prometheus gauges on `/metrics` (SGLang's or llama.cpp's); engines with none of them keep
//! zeros and are routed on the gateway's own bookings alone. A gRPC worker: its `GetLoads` RPC.
//! A data-parallel worker's rank units each get their own rank's entry of `/v1/loads` (and of
//! 0.5.9's `/get_load`); the worker itself gets the sum. Parsing: `load_report`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::load_report::{self, LoadSource, LoadSources};
use super::{EngineLoad, Registry, Worker, WorkerId};
use crate::upstream::Client;

/// Where a worker's load report comes from; found once, then remembered (like SMG memoises its
/// 404s), so a worker without `/v1/loads` is not asked for it four times a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    V1Loads,
    GetLoad,
    Metrics,
    GrpcGetLoads,
    None,
}

/// One poll's figures: the worker's as a whole, and rank by rank when it reported ranks.
struct Polled {
    whole: (EngineLoad, LoadSources),
    ranks: Vec<(EngineLoad, LoadSources)>,
}

async fn poll(
    client: &Client,
    worker: &Worker,
    source: Source,
    timeout: Duration,
) -> Option<Polled> {
    let body = |path: &'static str| async move {
        match client.get(&worker.origin, path, timeout).await {
            Ok((status, body)) if status.is_success() => Some(body),
            _ => None,
        }
    };
    let (first, fallback, ranks) = match source {
        Source::V1Loads => {
            let v1 = body("/v1/loads").await?;
            let r = load_report::v1_loads(&v1)?;
            let by_rank = load_report::v1_loads_by_rank(&v1).unwrap_or_default();
            // 0.5.9's /v1/loads has no waiting tokens; its /get_load does.
            let legacy = match r.waiting_tokens {
                Some(_) => None,
                None => body("/get_load").await,
            };
            let fallback = legacy
                .as_ref()
                .and_then(|b| load_report::get_load(b, r.used_tokens))
                .map(|g| (g, LoadSource::GetLoad));
            let used: Vec<Option<u64>> = by_rank.iter().map(|r| r.used_tokens).collect();
            let legacy_ranks = legacy
                .as_ref()
                .and_then(|b| load_report::get_load_by_rank(b, &used))
                .unwrap_or_default();
            let ranks = by_rank
                .into_iter()
                .enumerate()
                .map(|(i, rank)| {
                    let fallback = legacy_ranks.get(i).map(|g| (*g, LoadSource::GetLoad));
                    load_report::merge((rank, LoadSource::V1Loads), fallback)
                })
                .collect();
            ((r, LoadSource::V1Loads), fallback, ranks)
        }
        Source::GetLoad => {
            let r = load_report::get_load(&body("/get_load").await?, None)?;
            ((r, LoadSource::GetLoad), None, Vec::new())
        }
        Source::Metrics => {
            let text = body("/metrics").await?;
            let r = load_report::metrics(std::str::from_utf8(&text).ok()?)?;
            ((r, LoadSource::Metrics), None, Vec::new())
        }
        Source::GrpcGetLoads => {
            let r = crate::upstream::grpc::loads(client.grpc(), &worker.origin, timeout)
                .await
                .ok()?;
            (
                (load_report::grpc_loads(&r), LoadSource::GrpcGetLoads),
                None,
                Vec::new(),
            )
        }
        Source::None => return None,
    };
    Some(Polled {
        whole: load_report::merge(first, fallback),
        ranks,
    })
}

/// Tries each source in turn; `None` when the worker reports its load nowhere.
async fn discover(client: &Client, worker: &Worker, timeout: Duration) -> (Source, Option<Polled>) {
    let sources: &[Source] = if worker.origin.is_grpc() {
        &[Source::GrpcGetLoads]
    } else {
        &[Source::V1Loads, Source::GetLoad, Source::Metrics]
    };
    for &source in sources {
        if let Some(load) = poll(client, worker, source, timeout).await {
            return (source, Some(load));
        }
    }
    (Source::None, None)
}

/// A worker's load source and how many polls of it failed in a row.
type SourceState = (Source, u32);

/// Polls one worker (looking for its source again after too many misses) and records what it
/// reports, a data-parallel worker's `units` rank by rank; returns the worker's new source state.
async fn poll_worker(
    client: Client,
    worker: Arc<Worker>,
    units: Option<Arc<[Arc<Worker>]>>,
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
    if let Some(polled) = load {
        let (load, sources) = polled.whole;
        worker.set_engine_load(load);
        worker.set_load_sources(sources);
        for unit in units.iter().flat_map(|u| u.iter()) {
            let rank = unit.dp_rank().map_or(0, |r| r.rank as usize);
            if let Some((load, sources)) = polled.ranks.get(rank) {
                unit.set_engine_load(*load);
                unit.set_load_sources(*sources);
            }
        }
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
                        let units = registry.units_of(w.id);
                        let task = polls.spawn(poll_worker(client.clone(), Arc::clone(w), units, state, timeout));
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
