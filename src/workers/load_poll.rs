//! Polling each worker's own load report: SGLang's `/v1/loads` (0.5.x; 0.5.9's lacks waiting
//! tokens, which then come from its `/get_load`), else the deprecated `/get_load` list, else
//! Prometheus gauges on `/metrics` (SGLang's or llama.cpp's); engines with none of them keep
//! zeros and are routed on the gateway's own bookings alone. A gRPC worker: its `GetLoads` RPC.
//! A data-parallel worker's rank units each get their own rank's entry of `/v1/loads` (and of
//! 0.5.9's `/get_load`; a gRPC worker's: of `GetLoads`); the worker itself gets the sum. Parsing: `load_report`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

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
            let ranks = load_report::grpc_loads_by_rank(&r)
                .into_iter()
                .map(|rank| load_report::merge((rank, LoadSource::GrpcGetLoads), None))
                .collect();
            (
                (load_report::grpc_loads(&r), LoadSource::GrpcGetLoads),
                None,
                ranks,
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
/// reports, a data-parallel worker's `units` rank by rank; returns the worker's new source
/// state and the figures it reported.
async fn poll_worker(
    client: Client,
    worker: Arc<Worker>,
    units: Option<Arc<[Arc<Worker>]>>,
    (source, misses): SourceState,
    timeout: Duration,
) -> (SourceState, Option<EngineLoad>) {
    // Our bookings as the report is asked for (see `Worker::set_engine_load`).
    let asked = worker.in_flight();
    let units_asked: Vec<usize> = units
        .iter()
        .flat_map(|u| u.iter())
        .map(|u| u.in_flight())
        .collect();
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
    let reported = load.map(|polled| {
        let (load, sources) = polled.whole;
        worker.set_engine_load(load, asked);
        worker.set_load_sources(sources);
        for (unit, &asked) in units.iter().flat_map(|u| u.iter()).zip(&units_asked) {
            let rank = unit.dp_rank().map_or(0, |r| r.rank as usize);
            if let Some((load, sources)) = polled.ranks.get(rank) {
                unit.set_engine_load(*load, asked);
                unit.set_load_sources(*sources);
            }
        }
        load
    });
    (state, reported)
}

/// One worker's polling: its source, its current period and when it is next due.
struct Schedule {
    source: SourceState,
    every: Duration,
    due: Instant,
    last_poll: Instant,
    last_report: Option<EngineLoad>,
    in_poll: bool,
}

impl Schedule {
    fn new(now: Instant, base: Duration) -> Schedule {
        Schedule {
            source: (Source::None, REDISCOVER_AFTER),
            every: base,
            due: now,
            last_poll: now,
            last_report: None,
            in_poll: false,
        }
    }

    /// After a poll: the same idle figures as last time double the period (up to
    /// [`MAX_SLOWDOWN`] × `base`); anything else — a change, work of ours on the worker, no
    /// answer — brings it back to `base`.
    fn polled(&mut self, now: Instant, base: Duration, report: Option<EngineLoad>, ours: usize) {
        let unchanged = report.is_some() && report == self.last_report;
        self.every = if unchanged && ours == 0 {
            (self.every * 2).min(base * MAX_SLOWDOWN)
        } else {
            base
        };
        if report.is_some() {
            self.last_report = report;
        }
        self.last_poll = now;
        self.due = now + self.every;
        self.in_poll = false;
    }

    /// A worker this gateway is sending work to is polled at the base rate again.
    fn is_due(&self, now: Instant, base: Duration, ours: usize) -> bool {
        let due = if ours > 0 {
            self.due.min(self.last_poll + base)
        } else {
            self.due
        };
        !self.in_poll && now >= due
    }
}

/// Polls each healthy worker every `base`, slowing down (to [`MAX_SLOWDOWN`] × `base`) while
/// its figures do not change and this gateway has nothing on it — an idle fleet of thousands
/// costs little, to the gateway and to each worker. Polls run concurrently, at most one per
/// worker, and each records its figure when it lands: a worker that stalls holds only its own
/// poll, never the others' (nor the next tick).
pub fn spawn(
    registry: Arc<Registry>,
    client: Client,
    base: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut schedules: HashMap<WorkerId, Schedule> = HashMap::new();
        let mut polls: JoinSet<(SourceState, Option<EngineLoad>)> = JoinSet::new();
        let mut polling: HashMap<tokio::task::Id, Arc<Worker>> = HashMap::new();
        let mut tick = tokio::time::interval(base.min(TICK));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let timeout = base.max(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let workers = registry.snapshot();
                    if schedules.len() > workers.len() {
                        let live: HashSet<WorkerId> = workers.iter().map(|w| w.id).collect();
                        schedules.retain(|id, _| live.contains(id));
                    }
                    let now = Instant::now();
                    for w in workers.iter().filter(|w| w.is_healthy()) {
                        let s = schedules.entry(w.id).or_insert_with(|| Schedule::new(now, base));
                        if !s.is_due(now, base, ours(&registry, w)) {
                            continue;
                        }
                        s.in_poll = true;
                        let units = registry.units_of(w.id);
                        let task = polls.spawn(poll_worker(client.clone(), Arc::clone(w), units, s.source, timeout));
                        polling.insert(task.id(), Arc::clone(w));
                    }
                }
                Some(done) = polls.join_next_with_id() => {
                    let (task, result) = match done {
                        Ok((task, result)) => (task, Some(result)),
                        Err(e) => (e.id(), None),
                    };
                    let Some(w) = polling.remove(&task) else { continue };
                    let Some(s) = schedules.get_mut(&w.id) else { continue };
                    let ours = ours(&registry, &w);
                    let report = match result {
                        Some((source, report)) => {
                            s.source = source;
                            report
                        }
                        None => None,
                    };
                    s.polled(Instant::now(), base, report, ours);
                }
            }
        }
    })
}

/// Requests this gateway has on a worker, its DP ranks' included.
fn ours(registry: &Registry, w: &Worker) -> usize {
    let ranks = registry
        .units_of(w.id)
        .map_or(0, |units| units.iter().map(|u| u.in_flight()).sum());
    w.in_flight() + ranks
}

/// How often the schedule is looked at (the resolution of the polling periods).
const TICK: Duration = Duration::from_millis(250);

/// An idle worker whose figures do not change is polled up to this many times less often (32 s
/// at the default 1 s): at 4,000 workers an 8 s ceiling still meant 500 polls a second, each a
/// connection of its own (idle pooled connections close after 4 s), for figures that stay 0.
/// A change, or work of ours on it, brings it back to the base rate at its next poll.
const MAX_SLOWDOWN: u32 = 32;

/// Failed polls (or polls of a worker with no source) before the sources are tried again.
const REDISCOVER_AFTER: u32 = 40;

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> Option<EngineLoad> {
        Some(EngineLoad::default())
    }

    #[test]
    fn an_idle_unchanged_worker_slows_to_32_times_the_base_period() {
        let base = Duration::from_secs(1);
        let mut now = Instant::now();
        let mut s = Schedule::new(now, base);
        let mut periods = Vec::new();
        for _ in 0..8 {
            s.polled(now, base, idle(), 0);
            periods.push(s.every.as_secs());
            now = s.due;
        }
        assert_eq!(periods, [1, 2, 4, 8, 16, 32, 32, 32]);
        // Work of ours on it: due at the base rate again, and back to it after the next poll.
        assert!(s.is_due(s.last_poll + base, base, 1));
        s.polled(now, base, idle(), 1);
        assert_eq!(s.every, base);
        // A change of figures does the same.
        s.polled(now, base, idle(), 0);
        s.polled(now, base, idle(), 0);
        assert_eq!(s.every.as_secs(), 4);
        let busy = EngineLoad {
            running_requests: 1,
            ..EngineLoad::default()
        };
        s.polled(now, base, Some(busy), 0);
        assert_eq!(s.every, base);
    }
}
