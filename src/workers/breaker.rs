//! A per-worker circuit breaker: consecutive failed requests open it (the worker gets no
//! traffic), after a cool-down it half-opens (the next request is a probe), and one success
//! closes it again.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Failed requests in a row that open the breaker.
pub const FAILURES_TO_OPEN: u32 = 5;
/// How long an open breaker keeps the worker out before a probe request.
pub const COOL_DOWN: Duration = Duration::from_secs(10);

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

#[derive(Debug, Default)]
pub struct Breaker {
    failures: AtomicU32,
    /// Milliseconds since [`epoch`] until which the breaker stays open; 0 = closed.
    open_until_ms: AtomicU64,
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

    /// Whether the worker may take a request now (closed, or half-open for a probe).
    pub fn allows(&self) -> bool {
        self.state() != BreakerState::Open
    }

    pub fn record_success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        if self.open_until_ms.swap(0, Ordering::Relaxed) != 0 {
            self.transitions.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn record_failure(&self) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= FAILURES_TO_OPEN {
            // Opening again from half-open restarts the cool-down.
            let until = now_ms() + COOL_DOWN.as_millis() as u64;
            if self.open_until_ms.swap(until, Ordering::Relaxed) == 0 {
                self.transitions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Times the breaker opened or closed (for the transitions metric).
    pub fn transitions(&self) -> u64 {
        self.transitions.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        b.open_until_ms.store(1, Ordering::Relaxed); // a cool-down that has already passed
        let _ = epoch();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.allows());
    }
}
