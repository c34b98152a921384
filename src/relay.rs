//! Serving a generation: the exchange with the workers (one core for every path: the ending,
//! the deadlines and the retry loop) and relaying what they send to the client, as its API's
//! stream events, one JSON object, or the worker's own bytes.
//!
//! Inside, bottom to top: `reliability` (settings, deadlines, backoff) → `exchange` (a request's
//! resources and its ending) → `retry` (pick → try → classify → back off → next worker) →
//! `generation` (token ids over `/generate` or gRPC `Generate`, each leg opened by `leg`, with
//! migration) and
//! `passthrough` (bodies forwarded as they are, `observe` reading their token counts) →
//! `grammar` (one API's events and objects: `format` for OpenAI chat and completions,
//! `messages` for Anthropic, `responses` for OpenAI Responses) → `stream`, `collect`, `native`
//! (SGLang's `/generate` shape); `pump` is a streamed body read by the client's connection, with a
//! watch that ends the stream of a client that stops reading.

pub mod choices;
pub mod collect;
pub mod exchange;
pub mod format;
pub mod generation;
pub mod grammar;
mod leg;
pub mod messages;
pub mod native;
mod observe;
pub mod passthrough;
pub mod pd;
mod pump;
pub mod reliability;
pub mod responses;
pub mod retry;
pub mod stream;

use std::sync::Arc;

pub use exchange::Exchange;
pub use generation::Generation;

use crate::metrics::Metrics;
use crate::routing::Router;
use crate::tokenize::Tokenizer;
use crate::upstream::Client;
use reliability::ReliabilityConfig;

/// What every exchange with the workers shares.
pub struct Relay {
    pub router: Arc<Router>,
    /// Prefill/decode disaggregation: the prefill pool (`router` then holds the decode workers).
    pub prefill: Option<Arc<crate::routing::pd::PrefillPool>>,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    /// Detokenizes the output of workers that send only ids (`--skip-tokenizer-init`).
    pub tokenizer: Arc<Tokenizer>,
    pub reliability: ReliabilityConfig,
    /// Limit for a whole request (0 = none).
    pub request_timeout_secs: u64,
    /// Flipped to `true` when the shutdown grace period is over: in-flight exchanges end.
    pub shutdown: tokio::sync::watch::Sender<bool>,
}
