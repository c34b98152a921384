//! Per-request latency bookkeeping: TTFT, inter-token gaps, TPOT and end-to-end, observed once
//! the response really ended (not when its headers went out).

use std::time::Instant;

use super::LatencyHandles;

pub struct RequestTimer {
    start: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    tokens: u64,
}

impl RequestTimer {
    pub fn start_at(start: Instant) -> RequestTimer {
        RequestTimer {
            start,
            first: None,
            last: None,
            tokens: 0,
        }
    }

    pub fn started(&self) -> Instant {
        self.start
    }

    pub fn has_first_token(&self) -> bool {
        self.first.is_some()
    }

    /// `n` tokens arrived together. After the first chunk (TTFT), each token's gap is the chunk
    /// gap split evenly, as bench_serving does for SGLang's native stream.
    pub fn tokens(&mut self, n: u64, handles: &LatencyHandles) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        match self.last {
            None => {
                handles.ttft.observe((now - self.start).as_secs_f64());
                self.first = Some(now);
            }
            Some(prev) => {
                let gap = (now - prev).as_secs_f64() / n as f64;
                for _ in 0..n {
                    handles.itl.observe(gap);
                }
            }
        }
        self.last = Some(now);
        self.tokens += n;
    }

    /// The response ended (success or not): E2E, and TPOT when more than one token came in more
    /// than one chunk (tokens that all came at once, as a whole answer does, time no decoding).
    pub fn finish(&self, handles: &LatencyHandles) -> f64 {
        let e2e = self.start.elapsed().as_secs_f64();
        handles.e2e.observe(e2e);
        if let (Some(first), true) = (self.first, self.tokens > 1 && self.last != self.first) {
            let decode = (Instant::now() - first).as_secs_f64();
            handles.tpot.observe(decode / (self.tokens - 1) as f64);
        }
        e2e
    }
}
