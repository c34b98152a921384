//! Retry, migration and timeout settings (`switchboard serve` flags), and the deadlines one
//! request runs under.

use std::time::{Duration, Instant};

use clap::Args;
use rand::Rng;

#[derive(Debug, Clone, Args)]
pub struct ReliabilityConfig {
    /// Retries on another worker while nothing has reached the client and the worker provably
    /// did not start the generation (connect error, 503/429, "queue full").
    #[arg(long, default_value_t = 2)]
    pub max_retries: u32,
    /// First retry backoff in ms; doubles per retry, with jitter over its upper half.
    #[arg(long, default_value_t = 20)]
    pub retry_backoff_ms: u64,
    /// Times a generation whose worker died mid-stream is continued on another worker.
    #[arg(long, default_value_t = 1)]
    pub migration_limit: u32,
    /// Seconds to establish a TCP connection to a worker.
    #[arg(long, default_value_t = 5)]
    pub connect_timeout_secs: u64,
    /// Seconds from the request's arrival to its first token (0 = none).
    #[arg(long, default_value_t = 300)]
    pub ttft_timeout_secs: u64,
    /// Longest gap between two chunks of a running generation, in seconds (0 = none).
    #[arg(long, default_value_t = 120)]
    pub stream_idle_timeout_secs: u64,
    /// On SIGTERM: seconds in-flight requests may take to finish before they are aborted.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_period_secs: u64,
    /// How a worker sends the answer to a request whose client waits for all of it.
    #[arg(long, value_enum, default_value_t = WholeAnswers::Auto)]
    pub whole_answers: WholeAnswers,
}

/// How a worker sends an answer the client reads whole (not as a stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WholeAnswers {
    /// At once when the answer can be no longer than the first token and one chunk after it
    /// of 32 (`max_tokens` ≤ 33), where chunks would give nothing but the worker's time to first
    /// token: restarting such an answer elsewhere redoes at most 32 decode steps, and its wait
    /// has the limit its two chunks would have had. Chunked otherwise.
    Auto,
    /// Streamed in chunks (the first token at once, then a chunk per 32 tokens): the worker's
    /// real time to first token, its deadline and metric, the idle deadline, and migration when
    /// the worker dies.
    Chunked,
    /// One answer from the worker (a PD pair's too; not for a request with stop strings, which
    /// the gateway may have to apply itself as tokens come): one read and one parse instead of
    /// two, ~20 % less gateway CPU a short request. The wait may last as long as its chunks
    /// could have taken (see [`AtOnce`]); a worker that dies has the generation started over
    /// elsewhere (nothing reached the client), not continued; the time to first token recorded
    /// is the whole answer's, as its client sees it.
    AtOnce,
}

/// A worker asked for the whole answer in one response. Its first token is its last, so the
/// wait is bounded by what the chunked form's waits add up to: the first-token limit plus one
/// idle gap per chunk after the first token. An answer that would have come in time in chunks
/// is never cut; a stalled worker is caught that much later. An answer of unbounded length (no
/// `max_tokens`) waits under the total limit alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtOnce {
    /// Chunks the answer would have taken after its first token.
    pub chunks_after_first: Option<u32>,
}

impl ReliabilityConfig {
    /// The wait before retry number `retry` (1 for the first): exponential, and jittered so
    /// that retries from many clients spread out, but never shorter than half its cap, so that
    /// a retry always gives the fleet a moment.
    pub fn backoff(&self, retry: u32) -> Duration {
        let cap = self
            .retry_backoff_ms
            .saturating_mul(1 << retry.clamp(1, 10));
        Duration::from_millis(rand::rng().random_range(cap / 2..=cap))
    }
}

fn secs(s: u64) -> Option<Duration> {
    (s > 0).then(|| Duration::from_secs(s))
}

/// The time limits of one request.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    start: Instant,
    ttft: Option<Duration>,
    idle: Option<Duration>,
    total: Option<Duration>,
}

impl Deadlines {
    pub fn new(start: Instant, cfg: &ReliabilityConfig, total_secs: u64) -> Deadlines {
        Deadlines {
            start,
            ttft: secs(cfg.ttft_timeout_secs),
            idle: secs(cfg.stream_idle_timeout_secs),
            total: secs(total_secs),
        }
    }

    /// The first token comes with the whole answer: its limit is the first token's plus an
    /// idle gap per chunk the answer would have taken (see [`AtOnce`]).
    pub fn for_answer_at_once(self, at_once: AtOnce) -> Deadlines {
        let ttft = match (self.ttft, self.idle, at_once.chunks_after_first) {
            (Some(first), Some(gap), Some(chunks)) => Some(first + gap * chunks),
            _ => None,
        };
        Deadlines { ttft, ..self }
    }

    /// How long the next wait for the worker may take, and which limit that is.
    pub fn next_wait(&self, first_token_seen: bool) -> (Option<Duration>, &'static str) {
        let elapsed = self.start.elapsed();
        let left = |limit: Option<Duration>| limit.map(|l| l.saturating_sub(elapsed));
        let (gap, gap_name) = if first_token_seen {
            (self.idle, "idle gap between tokens")
        } else {
            (left(self.ttft), "time to first token")
        };
        match (gap, left(self.total)) {
            (Some(g), Some(t)) if t < g => (Some(t), "total request time"),
            (None, Some(t)) => (Some(t), "total request time"),
            (g, _) => (g, gap_name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ttft: u64, idle: u64) -> ReliabilityConfig {
        ReliabilityConfig {
            max_retries: 0,
            retry_backoff_ms: 0,
            migration_limit: 0,
            connect_timeout_secs: 1,
            ttft_timeout_secs: ttft,
            stream_idle_timeout_secs: idle,
            shutdown_grace_period_secs: 0,
            whole_answers: WholeAnswers::Auto,
        }
    }

    #[test]
    fn backoff_doubles_and_never_drops_below_half_its_cap() {
        let c = ReliabilityConfig {
            retry_backoff_ms: 20,
            ..cfg(0, 0)
        };
        for _ in 0..200 {
            let first = c.backoff(1).as_millis();
            let second = c.backoff(2).as_millis();
            assert!((20..=40).contains(&first), "{first}");
            assert!((40..=80).contains(&second), "{second}");
        }
        assert!(cfg(0, 0).backoff(1).is_zero());
    }

    #[test]
    fn picks_the_tightest_limit() {
        let d = Deadlines::new(Instant::now(), &cfg(10, 3), 100);
        let (w, what) = d.next_wait(false);
        assert!(w.is_some_and(|w| w <= Duration::from_secs(10) && w > Duration::from_secs(9)));
        assert_eq!(what, "time to first token");
        assert_eq!(
            d.next_wait(true),
            (Some(Duration::from_secs(3)), "idle gap between tokens")
        );
        let d = Deadlines::new(Instant::now(), &cfg(10, 3), 2);
        assert_eq!(d.next_wait(true).1, "total request time");
        let d = Deadlines::new(Instant::now(), &cfg(0, 0), 0);
        assert_eq!(d.next_wait(true).0, None);
    }

    #[test]
    fn an_answer_at_once_waits_as_long_as_its_chunks_could_have() {
        let unbounded = AtOnce {
            chunks_after_first: None,
        };
        let d = Deadlines::new(Instant::now(), &cfg(10, 3), 100).for_answer_at_once(unbounded);
        let (w, what) = d.next_wait(false);
        assert!(w.is_some_and(|w| w > Duration::from_secs(99)), "{w:?}");
        assert_eq!(what, "total request time");
        let d = Deadlines::new(Instant::now(), &cfg(10, 3), 0).for_answer_at_once(unbounded);
        assert_eq!(d.next_wait(false).0, None);
        let two_chunks = AtOnce {
            chunks_after_first: Some(2),
        };
        let d = Deadlines::new(Instant::now(), &cfg(10, 3), 100).for_answer_at_once(two_chunks);
        let (w, what) = d.next_wait(false);
        assert!(w.is_some_and(|w| w <= Duration::from_secs(16) && w > Duration::from_secs(15)));
        assert_eq!(what, "time to first token");
        // No idle limit: the chunks could have taken any time.
        let d = Deadlines::new(Instant::now(), &cfg(10, 0), 0).for_answer_at_once(two_chunks);
        assert_eq!(d.next_wait(false).0, None);
    }
}
