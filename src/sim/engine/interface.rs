//! What goes into the engine and what comes out: requests, refusals, steps and their events,
//! and the load report.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// A request as the caller decided it: `output` holds exactly the tokens it
/// will generate; none makes it prefill-only (SGLang's `max_new_tokens: 0`: the
/// prompt is computed and cached, and the request ends with its prefill).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRequest {
    pub id: RequestId,
    pub prompt: Vec<u32>,
    pub output: Vec<u32>,
}

/// Why `submit` refused a request. Display strings follow SGLang's messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("The request queue is full.")]
    QueueFull,
    #[error("The input ({prompt_tokens} tokens) is longer than the model's context length ({context_length} tokens).")]
    TooLong {
        prompt_tokens: usize,
        context_length: usize,
    },
    #[error("Requested token count exceeds the model's maximum context length of {context_length} tokens. You requested a total of {} tokens: {prompt_tokens} tokens from the input messages and {max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.", prompt_tokens + max_new_tokens)]
    ExceedsContext {
        prompt_tokens: usize,
        max_new_tokens: usize,
        context_length: usize,
    },
    #[error("The request needs {needed} KV tokens but the pool holds only {capacity}.")]
    ExceedsKvCapacity { needed: usize, capacity: usize },
    #[error("The input is empty.")]
    EmptyPrompt,
    /// Only the decode role refuses it: its first token comes from the prefill side.
    #[error("The request must generate at least one token.")]
    EmptyOutput,
    #[error("A request with this id is already in the engine.")]
    DuplicateId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepKind {
    Prefill,
    Decode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Its prefill (first chunk) was scheduled in this step. `cached_tokens` is
    /// the page-aligned radix match, at most `prompt_len − 1`.
    Started { id: RequestId, cached_tokens: usize },
    /// `produced` output tokens exist (1 after the last prefill chunk; 0 when a
    /// prefill-only request ends with its prefill).
    Token {
        id: RequestId,
        produced: usize,
        finished: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub kind: StepKind,
    pub duration_us: f64,
    /// Prompt tokens computed in this step (0 for a decode step).
    pub prefill_tokens: usize,
    pub events: Vec<Event>,
}

/// One rank's entry of SGLang's `GET /v1/loads`, plus cumulative counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSnapshot {
    pub dp_rank: usize,
    pub num_running_reqs: usize,
    pub num_waiting_reqs: usize,
    /// Σ waiting (prompt − current cache match) + rest of the chunked prompt.
    pub num_waiting_uncached_tokens: usize,
    /// KV in use, SGLang style: running requests' tokens + locked cache
    /// (excludes evictable cache).
    pub num_used_tokens: usize,
    pub max_total_num_tokens: usize,
    pub max_running_requests: usize,
    /// `num_used_tokens / max_total_num_tokens`.
    pub token_usage: f64,
    /// Cached prompt tokens / prompt tokens over all admitted requests.
    pub cache_hit_rate: f64,
    /// Tokens in the radix cache (locked + evictable).
    pub num_cached_tokens: usize,
    pub num_evictable_tokens: usize,
    pub total_prefill_uncached_tokens: u64,
    pub total_prefill_busy_us: f64,
    pub total_decode_busy_us: f64,
    pub total_generated_tokens: u64,
}
