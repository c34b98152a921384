//! Per-key token buckets: `rate` tokens a second, at most `burst` saved up, one per request.
//!
//! Keys are stored as hashes (a Bearer token can be kilobytes long), and the table is bounded:
//! without `--api-key` any client can invent keys, so a full table first drops buckets that
//! have refilled (they are indistinguishable from new ones; at most once a second, since the sweep
//! is linear), and past that newcomers share one overflow bucket rather than grow memory.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::Instant;

/// Most distinct keys tracked at once (~40 bytes each).
const MAX_KEYS: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

pub struct RateLimiter {
    rate: f64,
    burst: f64,
    /// Seeded per process so clients cannot aim keys at one hash.
    hasher: RandomState,
    table: Mutex<Table>,
    max_keys: usize,
}

#[derive(Default)]
struct Table {
    buckets: HashMap<u64, Bucket>,
    last_sweep: Option<Instant>,
}

impl RateLimiter {
    /// `rate` > 0 requests a second; `burst` defaults to one second's worth, at least 1.
    pub fn new(rate: f64, burst: Option<u32>) -> RateLimiter {
        let burst = burst.map_or(rate.ceil(), f64::from).max(1.0);
        RateLimiter {
            rate,
            burst,
            hasher: RandomState::new(),
            table: Mutex::new(Table::default()),
            max_keys: MAX_KEYS,
        }
    }

    /// `Ok` spends a token; `Err(secs)` is the `Retry-After` until one is there.
    pub fn check(&self, key: &[u8]) -> Result<(), u64> {
        self.check_at(self.hasher.hash_one(key), Instant::now())
    }

    fn check_at(&self, key: u64, now: Instant) -> Result<(), u64> {
        // A poisoned lock only means another request panicked mid-update; the map is still valid.
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Table {
            buckets,
            last_sweep,
        } = &mut *table;
        let swept_lately =
            last_sweep.is_some_and(|t| now.saturating_duration_since(t).as_secs() < 1);
        if buckets.len() >= self.max_keys && !buckets.contains_key(&key) && !swept_lately {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, b| refilled(b, rate, burst, now) < burst);
            *last_sweep = Some(now);
        }
        // Still full of active keys: the newcomer shares the overflow bucket (key 0).
        let key = if buckets.len() >= self.max_keys && !buckets.contains_key(&key) {
            0
        } else {
            key
        };
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let tokens = refilled(bucket, self.rate, self.burst, now);
        if tokens >= 1.0 {
            *bucket = Bucket {
                tokens: tokens - 1.0,
                at: now,
            };
            Ok(())
        } else {
            *bucket = Bucket { tokens, at: now };
            // Whole seconds, rounded up, at least 1 (`Retry-After: 0` invites a hot loop).
            Err(((1.0 - tokens) / self.rate).ceil().max(1.0) as u64)
        }
    }
}

fn refilled(b: &Bucket, rate: f64, burst: f64, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
    (b.tokens + elapsed * rate).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let l = RateLimiter::new(2.0, Some(3));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.check_at(1, t0), Ok(()));
        }
        assert_eq!(l.check_at(1, t0), Err(1));
        // Other keys have their own buckets.
        assert_eq!(l.check_at(2, t0), Ok(()));
        // Half a second at 2/s buys one request.
        assert_eq!(l.check_at(1, t0 + Duration::from_millis(500)), Ok(()));
        assert_eq!(l.check_at(1, t0 + Duration::from_millis(500)), Err(1));
    }

    #[test]
    fn slow_rates_ask_for_longer_waits() {
        let l = RateLimiter::new(0.1, None);
        let t0 = Instant::now();
        assert_eq!(l.check_at(7, t0), Ok(()));
        assert_eq!(l.check_at(7, t0), Err(10));
    }

    #[test]
    fn table_stays_bounded() {
        let mut l = RateLimiter::new(1.0, Some(1));
        l.max_keys = 4;
        let t0 = Instant::now();
        for k in 1..=4 {
            assert_eq!(l.check_at(k, t0), Ok(()));
        }
        // Full of active keys: a newcomer gets the overflow bucket, which then runs dry.
        assert_eq!(l.check_at(5, t0), Ok(()));
        assert_eq!(l.check_at(6, t0), Err(1));
        let len = l.table.lock().map(|t| t.buckets.len()).unwrap_or(0);
        assert!(len <= 5, "{len} buckets");
        // Once the buckets have refilled they are dropped to make room.
        assert_eq!(l.check_at(9, t0 + Duration::from_secs(2)), Ok(()));
        let len = l.table.lock().map(|t| t.buckets.len()).unwrap_or(0);
        assert!(len <= 2, "{len} buckets");
    }
}
