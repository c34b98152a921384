//! Engine model of the simulated SGLang worker: scheduler, KV pool and prefix
//! cache, with a step-time model. Pure and synchronous: the caller owns time
//! (it sleeps each [`Step::duration_us`] and then delivers the step's events,
//! which describe what exists at the END of the step) and token text; the
//! engine owns batching, KV and cache.
//!
//! Scheduling follows SGLang's defaults (`managers/scheduler.py`,
//! `schedule_policy.py`):
//! * continuous batching with prefill priority: when a waiting request can be
//!   admitted (a free running slot and enough KV after evicting unlocked
//!   cache), the next step is a prefill batch of at most
//!   `min(max_prefill_tokens, chunked_prefill_size)` new tokens, FCFS; a prompt
//!   that does not fit is chunked and continues first in the next prefill step
//!   (one chunked request at a time). Prefill and decode are never mixed, so a
//!   prefill step stalls every running decode;
//! * otherwise a decode step: every running request produces one token;
//! * a request's cached prefix is the page-aligned radix match of its prompt
//!   minus the last token. Its prompt is inserted in the cache when its prefill
//!   completes and prompt + output when it finishes (then unlocked), so
//!   multi-turn follow-ups hit the whole previous context.
//!
//! KV accounting: the pool holds the radix tree plus every running request's
//! tokens not shared with the tree (prompt + produced − locked prefix).
//! **No retraction**: unlike SGLang, which admits optimistically
//! (`new_token_ratio`) and retracts running requests under pressure, admission
//! reserves a request's whole future (prompt + all output tokens), so running
//! requests never run out of KV; a request that does not fit even after
//! evicting all unlocked cache waits (head of line, FCFS).

mod interface;
mod scheduler;
pub mod speculative;
pub mod timing;
mod transferred;

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::radix::{NodeHandle, RadixCache};
pub use interface::{Event, LoadSnapshot, NewRequest, Rejection, RequestId, Step, StepKind};
pub use speculative::{DecodeStats, Speculative};
pub use timing::TimingModel;

/// Worker configuration. Defaults: a ~1B model on one H100 (see [`TimingModel`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EngineConfig {
    /// Running-batch cap (`--max-running-requests`). SGLang derives it from
    /// memory (often thousands for a small model); 256 is the batch size
    /// CUDA graphs are captured up to by default, and our benchmark point.
    pub max_running_requests: usize,
    /// Waiting-queue cap (`--max-queued-requests`); `None` = unlimited, as SGLang.
    pub max_queued_requests: Option<usize>,
    /// KV pool in tokens (`max_total_num_tokens`). Default 2,000,000: 80 GB ×
    /// 0.88 static fraction − 2.5 GB weights − graphs ≈ 66 GB at 32 KiB/token
    /// (Llama-3.2-1B: 16 layers × 8 KV heads × 64 dims × K,V × bf16).
    pub kv_capacity_tokens: usize,
    /// `--chunked-prefill-size`: 8192 on 80–160 GB GPUs.
    pub chunked_prefill_size: usize,
    /// `--max-prefill-tokens`: 16384.
    pub max_prefill_tokens: usize,
    /// `--page-size`: 1.
    pub page_size: usize,
    /// Model context length: 131072 (Llama-3.2-1B).
    pub context_length: usize,
    pub timing: TimingModel,
    /// Speculative decoding (`--speculative-algorithm` …): each decode step is a
    /// draft-and-verify round accepting several tokens per sequence.
    pub speculative: Option<Speculative>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_running_requests: 256,
            max_queued_requests: None,
            kv_capacity_tokens: 2_000_000,
            chunked_prefill_size: 8192,
            max_prefill_tokens: 16384,
            page_size: 1,
            context_length: 131_072,
            timing: TimingModel::default(),
            speculative: None,
        }
    }
}

/// A request: `tokens` = prompt ++ output.
#[derive(Debug)]
struct Request {
    id: RequestId,
    tokens: Vec<u32>,
    prompt_len: usize,
    /// Seeds its speculative acceptance draws (0 without speculation).
    seed: u64,
}

#[derive(Debug)]
struct Running {
    req: Request,
    /// Output tokens produced so far.
    produced: usize,
    /// Tokens of KV held: prefix + computed prompt + produced.
    kv_len: usize,
    /// Leading tokens shared with the (locked) radix path.
    shared: usize,
    handle: NodeHandle,
}

impl Running {
    fn output_len(&self) -> usize {
        self.req.tokens.len() - self.req.prompt_len
    }
    /// Its whole prompt is in KV (a prefill-only request is then done).
    fn prefilled(&self) -> bool {
        self.kv_len >= self.req.prompt_len
    }
    fn remaining(&self) -> usize {
        self.req.tokens.len() - self.kv_len
    }
}

#[derive(Debug, Default, Clone)]
struct Stats {
    prompt_tokens: u64,
    cached_tokens: u64,
    prefill_uncached: u64,
    prefill_busy_us: f64,
    decode_busy_us: f64,
    generated: u64,
    decode_log: speculative::DecodeLog,
}

#[derive(Debug)]
pub struct Engine {
    cfg: EngineConfig,
    radix: RadixCache,
    waiting: VecDeque<Request>,
    /// Admitted requests in admission order; at most one is mid-prefill.
    running: Vec<Running>,
    live: HashSet<RequestId>,
    /// Σ running (kv_len − shared).
    private_tokens: usize,
    /// Σ running remaining (tokens reserved for the future).
    reserved_tokens: usize,
    chunked: bool,
    stats: Stats,
    /// Decode role (PD): requests whose prompt KV arrived from a prefill worker, waiting for a
    /// running slot; with the cached count the prefill side reported.
    transferred: VecDeque<(Request, usize)>,
}

impl Engine {
    pub fn new(mut cfg: EngineConfig) -> Engine {
        cfg.page_size = cfg.page_size.max(1);
        cfg.chunked_prefill_size = cfg.chunked_prefill_size.max(1);
        cfg.max_prefill_tokens = cfg.max_prefill_tokens.max(1);
        cfg.max_running_requests = cfg.max_running_requests.max(1);
        Engine {
            radix: RadixCache::new(cfg.page_size),
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            live: HashSet::new(),
            private_tokens: 0,
            reserved_tokens: 0,
            chunked: false,
            stats: Stats::default(),
            transferred: VecDeque::new(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    pub fn submit(&mut self, req: NewRequest) -> Result<(), Rejection> {
        self.check(&req)?;
        if self
            .cfg
            .max_queued_requests
            .is_some_and(|max| self.waiting.len() >= max)
        {
            return Err(Rejection::QueueFull);
        }
        let prompt_len = req.prompt.len();
        let mut tokens = req.prompt;
        tokens.extend_from_slice(&req.output);
        self.live.insert(req.id);
        let seed = self.spec_seed(&tokens);
        self.waiting.push_back(Request {
            id: req.id,
            tokens,
            prompt_len,
            seed,
        });
        Ok(())
    }

    /// The seed of a request's speculative draws (0 without speculation).
    fn spec_seed(&self, tokens: &[u32]) -> u64 {
        self.cfg
            .speculative
            .map_or(0, |_| speculative::seed_of(tokens))
    }

    /// The checks every new request passes, whichever queue it joins.
    pub fn check(&self, req: &NewRequest) -> Result<(), Rejection> {
        let (prompt_tokens, max_new_tokens) = (req.prompt.len(), req.output.len());
        let context_length = self.cfg.context_length;
        if prompt_tokens == 0 {
            return Err(Rejection::EmptyPrompt);
        }
        if prompt_tokens >= context_length {
            return Err(Rejection::TooLong {
                prompt_tokens,
                context_length,
            });
        }
        if prompt_tokens + max_new_tokens > context_length {
            return Err(Rejection::ExceedsContext {
                prompt_tokens,
                max_new_tokens,
                context_length,
            });
        }
        let needed = prompt_tokens + max_new_tokens;
        if needed > self.cfg.kv_capacity_tokens {
            return Err(Rejection::ExceedsKvCapacity {
                needed,
                capacity: self.cfg.kv_capacity_tokens,
            });
        }
        if self.live.contains(&req.id) {
            return Err(Rejection::DuplicateId);
        }
        Ok(())
    }

    /// Removes a waiting or running request, releasing its slot, KV and cache
    /// lock at once (nothing of it is inserted in the cache). False if unknown.
    pub fn abort(&mut self, id: RequestId) -> bool {
        if !self.live.remove(&id) {
            return false;
        }
        if let Some(i) = self.waiting.iter().position(|r| r.id == id) {
            self.waiting.remove(i);
            return true;
        }
        if let Some(i) = self.transferred.iter().position(|(r, _)| r.id == id) {
            self.transferred.remove(i);
            return true;
        }
        if let Some(i) = self.running.iter().position(|r| r.req.id == id) {
            let r = self.running.remove(i);
            if r.kv_len < r.req.prompt_len {
                self.chunked = false;
            }
            self.radix.unlock(r.handle);
            self.private_tokens -= r.kv_len - r.shared;
            self.reserved_tokens -= r.remaining();
        }
        true
    }

    /// The next forward step, or `None` when there is nothing to run.
    pub fn step(&mut self) -> Option<Step> {
        if let Some(step) = self.admit_transferred() {
            return Some(step);
        }
        if let Some(step) = self.prefill_step() {
            return Some(step);
        }
        self.decode_step()
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty() && self.transferred.is_empty()
    }

    /// Empties the prefix cache; refused (false) unless idle, as SGLang.
    /// Records the radix cache's KV events from now on (`--kv-events-config`).
    pub fn record_kv_events(&mut self) {
        self.radix.record_events();
    }

    /// The KV events since the last call.
    pub fn take_kv_events(&mut self) -> Vec<super::kv_events::blocks::BlockEvent> {
        self.radix.take_events()
    }

    pub fn flush_cache(&mut self) -> bool {
        if !self.is_idle() {
            return false;
        }
        self.radix.clear();
        true
    }

    /// Cached prefix length of `tokens` now, without touching the cache.
    pub fn peek_cached(&self, tokens: &[u32]) -> usize {
        self.radix.peek_prefix(tokens)
    }

    /// Load report. Cost is O(Σ waiting prompt tokens) (prefix lookups).
    pub fn loads(&self) -> LoadSnapshot {
        let mut uncached: usize = self
            .waiting
            .iter()
            .map(|r| r.prompt_len - self.radix.peek_prefix(&r.tokens[..r.prompt_len - 1]))
            .sum();
        if self.chunked {
            uncached += self
                .running
                .iter()
                .filter(|r| r.kv_len < r.req.prompt_len)
                .map(|r| r.req.prompt_len - r.kv_len)
                .sum::<usize>();
        }
        let used = self.private_tokens + self.radix.protected_tokens();
        let cap = self.cfg.kv_capacity_tokens;
        let s = &self.stats;
        LoadSnapshot {
            dp_rank: 0,
            num_running_reqs: self.running.len(),
            num_waiting_reqs: self.waiting.len() + self.transferred.len(),
            num_waiting_uncached_tokens: uncached,
            num_used_tokens: used,
            max_total_num_tokens: cap,
            max_running_requests: self.cfg.max_running_requests,
            token_usage: if cap == 0 {
                0.0
            } else {
                used as f64 / cap as f64
            },
            cache_hit_rate: if s.prompt_tokens == 0 {
                0.0
            } else {
                s.cached_tokens as f64 / s.prompt_tokens as f64
            },
            num_cached_tokens: self.radix.cached_tokens(),
            num_evictable_tokens: self.radix.evictable_tokens(),
            total_prefill_uncached_tokens: s.prefill_uncached,
            total_prefill_busy_us: s.prefill_busy_us,
            total_decode_busy_us: s.decode_busy_us,
            total_generated_tokens: s.generated,
        }
    }
}

#[cfg(test)]
mod tests;
