//! One worker: its address and live state (health, breaker, load booked by the gateway, load
//! reported by its engine). All counters are atomics read on every routing decision.
//!
//! A data-parallel worker (`dp_size` N > 1) is routed as N rank units: each a `Worker` of its
//! own (id, bookings, engine load, prefix index entries) that shares the member's address,
//! health and breaker, and carries its rank into every request (see `registry`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::breaker::Breaker;
use super::load_report::LoadSources;
use crate::protocol::sglang::DpRank;
use crate::upstream::Origin;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct WorkerId(pub u32);

/// What the worker's engine last reported about itself (zeros until it first answers, and for
/// engines without `/v1/loads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineLoad {
    pub running_requests: u64,
    pub waiting_requests: u64,
    /// Prompt tokens queued for prefill that its cache does not already hold.
    pub waiting_uncached_tokens: u64,
}

/// `repr(C, align(64))` with everything routing reads of a worker in its first cache line: the
/// load figures a policy's scan reads on every pick, and the health and breaker's open flag the
/// registry's list of available units is built from (`availability`). A scan over thousands of
/// workers then touches one line per worker, where the compiler's field order and separately
/// allocated health and breaker spread them over four (`benches/routing.rs`, `pick/*/4000`).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Worker {
    pub id: WorkerId,
    healthy: AtomicBool,
    in_flight: AtomicUsize,
    /// Prefill tokens of requests that have not produced their first token yet.
    pending_prefill: AtomicU64,
    /// Requests the engine ran at its last report beyond ours (another gateway's, a client's
    /// straight to it): a pick adds them to our current bookings (see [`Worker::running`]).
    others_running: AtomicU64,
    engine_waiting_uncached: AtomicU64,
    /// A rank unit's worker, whose health, breaker and last first token it shares (`None` for
    /// a worker routed whole, which keeps its own).
    member: Option<Arc<Worker>>,
    /// `repr(C)` with the open flag first, so it is in this line.
    breaker: Breaker,
    pub origin: Arc<Origin>,
    engine_running: AtomicU64,
    engine_waiting: AtomicU64,
    /// When the worker last gave a client its first token (ms on [`clock_ms`]'s clock; 0 =
    /// never): traffic that proves it works stands in for a health probe.
    served_at_ms: AtomicU64,
    /// The rank this routing unit runs requests on; `None` for a worker routed whole.
    dp_rank: Option<DpRank>,
    /// Where the engine figures came from (shown in `GET /workers`).
    load_sources: std::sync::Mutex<LoadSources>,
}

/// Milliseconds since the first call, plus one (so 0 can mean "never").
fn clock_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
}

impl Worker {
    pub fn new(id: WorkerId, url: &str) -> Result<Worker, String> {
        Ok(Worker::with_origin(
            id,
            Arc::new(Origin::parse(url)?),
            None,
            None,
        ))
    }

    fn with_origin(
        id: WorkerId,
        origin: Arc<Origin>,
        member: Option<Arc<Worker>>,
        dp_rank: Option<DpRank>,
    ) -> Worker {
        Worker {
            id,
            // Unhealthy until the first health check answers.
            healthy: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            pending_prefill: AtomicU64::new(0),
            others_running: AtomicU64::new(0),
            engine_waiting_uncached: AtomicU64::new(0),
            member,
            breaker: Breaker::default(),
            origin,
            engine_running: AtomicU64::new(0),
            engine_waiting: AtomicU64::new(0),
            served_at_ms: AtomicU64::new(0),
            dp_rank,
            load_sources: Default::default(),
        }
    }

    /// One rank of this (data-parallel) worker as a routing unit of its own: same address,
    /// health and breaker (this worker's); its own load. A rank's traffic shows the worker
    /// works.
    pub fn rank_unit(self: &Arc<Worker>, id: WorkerId, rank: DpRank) -> Worker {
        Worker::with_origin(
            id,
            Arc::clone(&self.origin),
            Some(Arc::clone(self)),
            Some(rank),
        )
    }

    /// Where health, breaker and the last first token live: the member for a rank unit.
    fn shared(&self) -> &Worker {
        self.member.as_deref().unwrap_or(self)
    }

    /// The rank a request routed to this unit names (`None`: the worker balances itself).
    pub fn dp_rank(&self) -> Option<DpRank> {
        self.dp_rank
    }

    /// Base URL without a trailing slash.
    pub fn url(&self) -> &str {
        &self.origin.url
    }

    /// Healthy and not cut off by its breaker: may take new requests.
    pub fn is_available(&self) -> bool {
        self.is_healthy() && self.breaker().allows()
    }

    pub fn is_healthy(&self) -> bool {
        self.shared().healthy.load(Ordering::Relaxed)
    }

    pub fn set_healthy(&self, healthy: bool) {
        if self.shared().healthy.swap(healthy, Ordering::Relaxed) != healthy {
            super::availability::changed();
        }
    }

    /// Shared by a data-parallel worker's rank units.
    pub fn breaker(&self) -> &Breaker {
        &self.shared().breaker
    }

    /// Why the worker gets no traffic, if it does not.
    pub fn excluded_because(&self) -> Option<&'static str> {
        if !self.is_healthy() {
            Some("health check failing (or not answered yet)")
        } else if !self.breaker().allows() {
            Some("circuit breaker open after consecutive request failures")
        } else {
            None
        }
    }

    #[inline]
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn pending_prefill(&self) -> u64 {
        self.pending_prefill.load(Ordering::Relaxed)
    }

    pub fn engine_load(&self) -> EngineLoad {
        EngineLoad {
            running_requests: self.engine_running.load(Ordering::Relaxed),
            waiting_requests: self.engine_waiting.load(Ordering::Relaxed),
            waiting_uncached_tokens: self.engine_waiting_uncached.load(Ordering::Relaxed),
        }
    }

    /// The requests running on the worker as far as the gateway can tell now: its own bookings
    /// (exact and current) plus those the engine ran beyond them at its last report. The
    /// engine's figure alone is up to one poll old: a worker whose requests all just ended
    /// would still look full to a pick until its next report, and its next requests would go
    /// to a worker in the middle of its batch.
    #[inline]
    pub fn running(&self) -> u64 {
        (self.in_flight() as u64).saturating_add(self.others_running.load(Ordering::Relaxed))
    }

    /// `engine_load().waiting_uncached_tokens`, alone: a pick reads only what is in the
    /// worker's first cache line (`waiting_requests` is not).
    #[inline]
    pub fn engine_waiting_uncached(&self) -> u64 {
        self.engine_waiting_uncached.load(Ordering::Relaxed)
    }

    pub fn load_sources(&self) -> LoadSources {
        *self.load_sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_load_sources(&self, sources: LoadSources) {
        *self.load_sources.lock().unwrap_or_else(|e| e.into_inner()) = sources;
    }

    /// Records the engine's report. `ours_when_asked`: our bookings when the report was asked
    /// for; with those when it is read, the larger is taken as ours in the engine's count, so
    /// requests of ours that end in between are not mistaken for another client's.
    pub fn set_engine_load(&self, load: EngineLoad, ours_when_asked: usize) {
        let ours = ours_when_asked.max(self.in_flight()) as u64;
        self.others_running.store(
            load.running_requests.saturating_sub(ours),
            Ordering::Relaxed,
        );
        self.engine_running
            .store(load.running_requests, Ordering::Relaxed);
        self.engine_waiting
            .store(load.waiting_requests, Ordering::Relaxed);
        self.engine_waiting_uncached
            .store(load.waiting_uncached_tokens, Ordering::Relaxed);
    }

    /// A request on this worker got its first token.
    pub(super) fn mark_served(&self) {
        self.shared()
            .served_at_ms
            .store(clock_ms(), Ordering::Relaxed);
    }

    /// Whether a request got its first token from this worker within `window`.
    pub fn served_within(&self, window: std::time::Duration) -> bool {
        let at = self.shared().served_at_ms.load(Ordering::Relaxed);
        at != 0 && u128::from(clock_ms().saturating_sub(at)) <= window.as_millis()
    }

    pub(super) fn book(&self, prefill_tokens: u64) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.pending_prefill
            .fetch_add(prefill_tokens, Ordering::Relaxed);
    }

    pub(super) fn release_prefill(&self, prefill_tokens: u64) {
        self.pending_prefill
            .fetch_sub(prefill_tokens, Ordering::Relaxed);
    }

    pub(super) fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of};

    #[test]
    fn what_a_pick_reads_is_in_the_first_cache_line() {
        assert_eq!(align_of::<Worker>(), 64);
        // The breaker's open flag is its first field (`breaker`'s own test).
        let breaker_open = offset_of!(Worker, breaker);
        for end in [
            offset_of!(Worker, id) + 4,
            offset_of!(Worker, healthy) + 1,
            offset_of!(Worker, in_flight) + 8,
            offset_of!(Worker, pending_prefill) + 8,
            offset_of!(Worker, others_running) + 8,
            offset_of!(Worker, engine_waiting_uncached) + 8,
            offset_of!(Worker, member) + 8,
            breaker_open + 8,
        ] {
            assert!(end <= 64, "a field ends at byte {end}");
        }
    }

    #[test]
    fn rank_units_share_the_member_health_breaker_and_traffic() {
        let member = Arc::new(Worker::new(WorkerId(0), "http://127.0.0.1:1").unwrap());
        let rank = DpRank {
            rank: 1,
            size: 2,
            field: crate::protocol::sglang::RankField::RoutedDpRank,
        };
        let unit = member.rank_unit(WorkerId(1), rank);
        assert!(!unit.is_healthy());
        member.set_healthy(true);
        assert!(unit.is_available());
        for _ in 0..crate::workers::breaker::FAILURES_TO_OPEN {
            unit.breaker().record_failure();
        }
        assert!(
            !member.is_available(),
            "a rank's failures open the worker's breaker"
        );
        unit.mark_served();
        assert!(member.served_within(std::time::Duration::from_secs(60)));
        // Its load is its own.
        unit.book(10);
        assert_eq!((unit.in_flight(), member.in_flight()), (1, 0));
    }

    #[test]
    fn running_is_our_bookings_now_plus_the_engines_others_at_its_last_report() {
        let w = Worker::new(WorkerId(0), "http://127.0.0.1:1").unwrap();
        for _ in 0..128 {
            w.book(0);
        }
        let report = |running| EngineLoad {
            running_requests: running,
            ..EngineLoad::default()
        };
        // The engine runs our 128 and 20 of someone else's.
        w.set_engine_load(report(148), 128);
        assert_eq!(w.running(), 148);
        // Ours end before the next report: they are not counted any longer.
        for _ in 0..120 {
            w.release();
        }
        assert_eq!(w.running(), 28);
        assert_eq!(
            w.engine_load().running_requests,
            148,
            "the report itself is kept"
        );
        // A report asked for while 128 of ours ran and read after 120 ended counts the 128 as
        // ours, not as someone else's.
        w.set_engine_load(report(128), 128);
        assert_eq!(w.running(), 8);
    }
}
