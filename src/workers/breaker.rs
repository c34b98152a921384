//! A per-worker circuit breaker: consecutive failed requests open it (the worker gets no
//! traffic), after a cool-down it half-opens and admits one probe request at a time; the probe's
//! success closes it, its failure opens it again.
//!
//! Routing asks [`Breaker::allows`] about every candidate on every pick, so that only looks;
//! the probe is claimed with [`Breaker::admit`] once a worker is actually picked. All atomics:
//! this sits on every request's path.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::availability;

/// Failed requests in a row that open the breaker.
pub const FAILURES_TO_OPEN: u32 = 5;
/// How long an open breaker keeps the worker out before a probe request.
pub const COOL_DOWN: Duration = Duration::from_secs(10);
/// A probe that has reported nothing for this long (its client left, say) no longer blocks the
/// next one.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn name(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// What [`Breaker::admit`] let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Refused,
    Admitted,
    /// The half-open probe, claimed at this time (ms since the breaker's epoch).
    Probe(u64),
}

impl Admission {
    pub fn admitted(self) -> bool {
        self != Admission::Refused
    }

    pub fn probe(self) -> Option<u64> {
        match self {
            Admission::Probe(at) => Some(at),
            _ => None,
        }
    }
}

/// `repr(C)`, the open flag first: a `Worker` keeps it in the cache line every pick reads.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Breaker {
    /// Milliseconds since [`epoch`] until which the breaker stays open; 0 = closed.
    open_until_ms: AtomicU64,
    failures: AtomicU32,
    /// Milliseconds since [`epoch`] at which the half-open probe in flight was admitted; 0 = none.
    probe_since_ms: AtomicU64,
    transitions: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

impl Breaker {
    pub fn state(&self) -> BreakerState {
        match self.open_until_ms.load(Ordering::Relaxed) {
            0 => BreakerState::Closed,
            until if now_ms() < until => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// Closed: lets every request through until a change of state (which
    /// [`availability`] hears of).
    #[inline]
    pub fn is_closed(&self) -> bool {
        self.open_until_ms.load(Ordering::Relaxed) == 0
    }

    /// Whether the worker may take a request now: closed, or half-open with no probe in flight.
    /// Only looks; [`Breaker::admit`] claims the probe. Inlined: every pick asks it of every
    /// candidate, and a closed breaker answers with one load.
    #[inline]
    pub fn allows(&self) -> bool {
        self.is_closed() || self.allows_when_tripped()
    }

    fn allows_when_tripped(&self) -> bool {
        match self.state() {
            BreakerState::Closed => true,
            BreakerState::Open => false,
            BreakerState::HalfOpen => {
                probe_free(self.probe_since_ms.load(Ordering::Acquire), now_ms())
            }
        }
    }

    /// The worker was picked: whether it may take the request. When half-open this claims the
    /// one probe, and `Refused` means another request holds it (pick another worker).
    pub fn admit(&self) -> Admission {
        match self.state() {
            BreakerState::Closed => Admission::Admitted,
            BreakerState::Open => Admission::Refused,
            BreakerState::HalfOpen => {
                let (since, now) = (self.probe_since_ms.load(Ordering::Acquire), now_ms());
                // `max(1)`: 0 means "no probe", and the epoch's first millisecond is a real time.
                let claim = now.max(1);
                let claimed = probe_free(since, now)
                    && self
                        .probe_since_ms
                        .compare_exchange(since, claim, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok();
                if claimed {
                    Admission::Probe(claim)
                } else {
                    Admission::Refused
                }
            }
        }
    }

    /// The probe claimed at `claim` ended without a verdict (its client left): the next request
    /// may probe at once instead of after [`PROBE_TIMEOUT`]. A later claim is left alone.
    pub fn release_probe(&self, claim: u64) {
        let _ = self
            .probe_since_ms
            .compare_exchange(claim, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    pub fn record_success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        let was_open = self.open_until_ms.swap(0, Ordering::Relaxed) != 0;
        self.probe_since_ms.store(0, Ordering::Release);
        if was_open {
            self.transitions.fetch_add(1, Ordering::Relaxed);
            availability::changed();
        }
    }

    pub fn record_failure(&self) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= FAILURES_TO_OPEN {
            // Opening again from half-open restarts the cool-down.
            let until = now_ms() + COOL_DOWN.as_millis() as u64;
            let was_closed = self.open_until_ms.swap(until, Ordering::Relaxed) == 0;
            // Open again: the next probe is due after the new cool-down.
            self.probe_since_ms.store(0, Ordering::Release);
            if was_closed {
                self.transitions.fetch_add(1, Ordering::Relaxed);
                availability::changed();
            }
        }
    }

    /// Puts the breaker where its cool-down has just ended, for tests elsewhere in the crate.
    #[cfg(test)]
    pub(crate) fn half_open_now(&self) {
        self.failures.store(FAILURES_TO_OPEN, Ordering::Relaxed);
        let _ = epoch();
        std::thread::sleep(Duration::from_millis(2));
        self.open_until_ms.store(1, Ordering::Relaxed);
        availability::changed();
    }

    /// Times the breaker opened or closed (for the transitions metric).
    pub fn transitions(&self) -> u64 {
        self.transitions.load(Ordering::Relaxed)
    }
}

fn probe_free(since_ms: u64, now_ms: u64) -> bool {
    since_ms == 0 || now_ms.saturating_sub(since_ms) >= PROBE_TIMEOUT.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_flag_comes_first() {
        assert_eq!(std::mem::offset_of!(Breaker, open_until_ms), 0);
    }

    #[test]
    fn opens_after_consecutive_failures_and_closes_on_success() {
        let b = Breaker::default();
        for _ in 0..FAILURES_TO_OPEN - 1 {
            b.record_failure();
        }
        assert_eq!(b.state(), BreakerState::Closed);
        b.record_success();
        for _ in 0..FAILURES_TO_OPEN {
            b.record_failure();
        }
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.allows());
        b.record_success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.transitions(), 2);
    }

    #[test]
    fn half_opens_after_the_cool_down() {
        let b = Breaker::default();
        b.half_open_now();
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.allows());
    }

    #[test]
    fn half_open_admits_one_probe_until_it_resolves() {
        let b = Breaker::default();
        b.half_open_now();
        // Looking (routing filters every candidate on every pick) does not take the probe.
        for _ in 0..3 {
            assert!(b.allows());
        }
        assert!(
            b.admit().admitted(),
            "the first picked request is the probe"
        );
        assert!(!b.allows(), "no second request while the probe is out");
        assert!(!b.admit().admitted());
        // The probe fails: open again, for a whole new cool-down.
        b.record_failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.admit().admitted());
        // After it, one probe again; its success closes the breaker for everyone.
        b.half_open_now();
        assert!(b.admit().admitted());
        assert!(!b.admit().admitted());
        b.record_success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert!((0..3).all(|_| b.admit().admitted()));
    }

    #[test]
    fn concurrent_picks_get_one_probe() {
        let b = std::sync::Arc::new(Breaker::default());
        b.half_open_now();
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| (0..100).filter(|_| b.admit().admitted()).count()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        assert_eq!(admitted, 1);
    }

    #[test]
    fn a_silent_probe_lapses() {
        let timeout = PROBE_TIMEOUT.as_millis() as u64;
        assert!(probe_free(0, 5));
        assert!(!probe_free(100, 100 + timeout - 1));
        assert!(probe_free(100, 100 + timeout));
    }
}
