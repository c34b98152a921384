//! One generation on the token-id path: possibly several legs (workers), one stream of deltas
//! for the client. It starts once the first token is in hand (so every failure up to then is
//! still an HTTP error), and continues on another worker when one dies mid-stream
//! (`--migration-limit`). Its ending goes through the [`Exchange`].

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

mod migration;

use migration::cut_overlap;

use super::exchange::{Exchange, Placement, Usage};
use super::leg::{open_leg, Leg};
use super::reliability::{AtOnce, WholeAnswers};
use super::retry;
use super::Relay;
use crate::error::GatewayError;
use crate::metrics::Endpoint;
use crate::protocol::sglang::SamplingParams;
use crate::upstream::generate::Delta;
use crate::upstream::tokens::TokenStream;
use crate::upstream::UpstreamError;

pub struct Spec {
    pub rid: String,
    pub prompt: Vec<u32>,
    pub params: SamplingParams,
    pub session_key: Option<String>,
    /// Output logprobs with this many top tokens each (`None`: not asked for).
    pub logprobs: Option<u32>,
    /// Workers to start on while they can take it (a fan-out's later generations).
    pub prefer: Option<Placement>,
    /// The client waits for the whole answer (set by [`Spec::for_client`]).
    pub whole: bool,
}

/// The `stream_interval` a worker is asked for when the client waits for the whole answer:
/// SGLang then streams the first token at once (so the time to first token, its deadline and
/// its metric stay the worker's real ones) and afterwards a chunk per this many tokens instead
/// of one per token, each a whole cumulative object the gateway would read. Every guarantee of
/// a stream holds at that grain: a migration continues from the last chunk's ids (redoing at
/// most 31 tokens, which no client saw), and 32 decode steps stay far inside the idle deadline.
pub const WHOLE_ANSWER_STREAM_INTERVAL: u32 = 32;

impl Spec {
    /// Unless the client reads a stream (`streamed`), it waits for the whole answer: the worker
    /// streams it in chunks of [`WHOLE_ANSWER_STREAM_INTERVAL`] tokens, unless the client chose
    /// its own interval or the request has stop strings. Those the gateway applies itself for a
    /// worker that sends ids only (or over gRPC), and ends the worker's generation at once when
    /// it meets one: it needs every token as it comes.
    pub fn for_client(mut self, streamed: bool) -> Spec {
        self.whole = !streamed;
        if !streamed && self.params.stop.is_empty() {
            self.params
                .stream_interval
                .get_or_insert(WHOLE_ANSWER_STREAM_INTERVAL);
        }
        self
    }

    /// Whether the worker is asked for the whole answer in one response (`--whole-answers`):
    /// never with stop strings (see [`Spec::for_client`]: the gateway may have to end the
    /// generation at one, which it can only do while the tokens come one by one), nor under
    /// `auto` for an answer that may need more than one chunk after its first token.
    fn at_once(&self, relay: &Relay) -> Option<AtOnce> {
        if !self.whole || !self.params.stop.is_empty() {
            return None;
        }
        let interval = self
            .params
            .stream_interval
            .unwrap_or(WHOLE_ANSWER_STREAM_INTERVAL)
            .max(1);
        // Tokens after the first, in chunks of the interval.
        let chunks_after_first = self
            .params
            .max_new_tokens
            .map(|n| n.saturating_sub(1).div_ceil(interval));
        let at_once = AtOnce { chunks_after_first };
        match relay.reliability.whole_answers {
            WholeAnswers::AtOnce => Some(at_once),
            WholeAnswers::Auto if chunks_after_first.is_some_and(|c| c <= 1) => Some(at_once),
            WholeAnswers::Auto | WholeAnswers::Chunked => None,
        }
    }
}

pub struct Generation {
    exchange: Exchange,
    spec: Spec,
    upstream: TokenStream,
    /// The first chunk, read while opening the leg, not yet handed out.
    pending: Option<Delta>,
    /// Output ids relayed by earlier legs (the current leg's are in its stream).
    earlier_ids: Vec<u32>,
    /// All text handed out so far, over every leg (a continued leg starts from it).
    sent: String,
    /// Text the client already has that a continued leg's decoder has yet to produce (the dead
    /// worker had released more than our decoder would): cut from that leg's first text.
    overlap: String,
    /// Tokens produced by earlier legs (a migrated leg counts from zero again).
    tokens_before_leg: u32,
    migrations: u32,
    /// The current leg continues a stream (its prompt holds relayed tokens): its prompt and
    /// cached counts are not the request's. A restart before the first token is not one.
    continued: bool,
    tried: retry::Tried,
}

impl Generation {
    /// Routes and starts the generation; returns once the first token is in hand. Boxed: a
    /// generation is ~2 KiB and moves through every layer that relays it.
    pub fn start(
        relay: &Arc<Relay>,
        spec: Spec,
        endpoint: Endpoint,
        start: Instant,
    ) -> impl Future<Output = Result<Box<Generation>, GatewayError>> + Send + 'static {
        Generation::start_in(Exchange::new(relay, endpoint, start), spec)
    }

    /// One of a request's several generations: it records nothing itself (see
    /// [`Exchange::part`]).
    pub fn start_part(
        relay: &Arc<Relay>,
        spec: Spec,
        endpoint: Endpoint,
        start: Instant,
    ) -> impl Future<Output = Result<Box<Generation>, GatewayError>> + Send + 'static {
        Generation::start_in(Exchange::part(relay, endpoint, start), spec)
    }

    // Not an `async fn`, which would keep its arguments twice (as captured, and moved into
    // the body's locals): with the exchange and the spec that is 1.4 KiB per request.
    #[allow(clippy::manual_async_fn)]
    fn start_in(
        mut exchange: Exchange,
        spec: Spec,
    ) -> impl Future<Output = Result<Box<Generation>, GatewayError>> + Send + 'static {
        async move {
            let mut tried = retry::Tried::default();
            let (opened, migrations) = open_first(&mut exchange, &spec, &mut tried).await;
            let (upstream, first) = match opened {
                Ok(o) => o,
                Err(e) => {
                    exchange.hand_back();
                    return Err(e);
                }
            };
            Ok(Box::new(Generation {
                exchange,
                spec,
                upstream,
                pending: Some(first),
                earlier_ids: Vec::new(),
                sent: String::new(),
                overlap: String::new(),
                tokens_before_leg: 0,
                migrations,
                continued: false,
                tried,
            }))
        }
    }

    /// The request's time limits.
    pub fn deadlines(&self) -> super::reliability::Deadlines {
        self.exchange.deadlines()
    }

    pub fn relay(&self) -> &Arc<Relay> {
        self.exchange.relay()
    }

    /// Token counts so far, as OpenAI's `usage`.
    pub fn usage(&self) -> crate::protocol::openai::Usage {
        let u = self.exchange.usage;
        let n = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        crate::protocol::openai::Usage::new(
            n(u.prompt_tokens),
            n(u.completion_tokens),
            n(u.cached_tokens),
        )
    }

    /// Token counts so far, as recorded.
    pub fn counts(&self) -> Usage {
        self.exchange.usage
    }

    /// Where the generation runs now.
    pub fn placement(&self) -> Option<Placement> {
        self.exchange.placement()
    }

    /// How much of the prompt the policy expected the worker to have cached.
    pub fn predicted_cached(&self) -> usize {
        self.exchange.predicted_cached()
    }

    /// Every output id relayed so far, over all legs.
    pub fn output_ids(&self) -> Vec<u32> {
        let mut ids = self.earlier_ids.clone();
        ids.extend_from_slice(self.upstream.output_ids());
        ids
    }

    /// The next delta; `Ok(None)` after the finishing one.
    pub async fn next(&mut self) -> Result<Option<Delta>, UpstreamError> {
        loop {
            if self.exchange.ended() {
                return Ok(None);
            }
            let got = match self.pending.take() {
                Some(d) => Ok(Some(d)),
                // Pinned here, so `wait` holds a pointer: passed by value the worker's read
                // was copied into `wait`'s future and again inside it, on every token.
                None => {
                    let next = std::pin::pin!(self.upstream.next_delta());
                    self.exchange.wait(next).await
                }
            };
            match got {
                Ok(Some(delta)) => return Ok(Some(self.accept(delta))),
                Ok(None) => {
                    self.exchange.succeed();
                    return Ok(None);
                }
                Err(e) if self.can_migrate(&e) => {
                    // Boxed: a migration is rare, and its state would otherwise double the
                    // size of the future every delta of every generation builds.
                    if let Err(e2) = Box::pin(self.migrate(&e)).await {
                        self.exchange.fail(&e2);
                        return Err(e2);
                    }
                }
                Err(e) => {
                    self.exchange.fail(&e);
                    return Err(e);
                }
            }
        }
    }

    fn accept(&mut self, mut delta: Delta) -> Delta {
        self.exchange.tokens(u64::from(delta.new_tokens));
        let usage = &mut self.exchange.usage;
        if !self.continued {
            usage.prompt_tokens = u64::from(delta.prompt_tokens);
            usage.cached_tokens = u64::from(delta.cached_tokens);
        }
        delta.completion_tokens += self.tokens_before_leg;
        usage.completion_tokens = u64::from(delta.completion_tokens);
        delta.prompt_tokens = usage.prompt_tokens as u32;
        if !self.overlap.is_empty() {
            cut_overlap(&mut delta.text, &mut self.overlap);
        }
        self.sent.push_str(&delta.text);
        if let Some(finish) = &delta.finish {
            self.exchange.finished_with(finish.openai());
            if self.upstream.stopped_here() {
                self.exchange.succeed_early();
            } else {
                self.exchange.succeed();
            }
        }
        delta
    }
}

/// Opens the generation's first leg. A worker that dies before its first token took nothing
/// to the client, and its generation is gone with it, so it is started over elsewhere (up to
/// the migration limit). Returns the leg, or the error, and how many restarts it took.
async fn open_first(
    exchange: &mut Exchange,
    spec: &Spec,
    tried: &mut retry::Tried,
) -> (Result<(TokenStream, Delta), GatewayError>, u32) {
    let relay = Arc::clone(exchange.relay());
    let mut migrations = 0;
    // Why the last restart was needed: if no worker is left to restart on, that is the
    // client's error, not "no healthy worker".
    let mut died: Option<UpstreamError> = None;
    loop {
        let leg = Leg {
            input_ids: &spec.prompt,
            params: &spec.params,
            session_key: spec.session_key.as_deref(),
            rid: &spec.rid,
            logprobs: spec.logprobs,
            prefer: spec.prefer,
            at_once: spec.at_once(&relay),
        };
        match open_leg(exchange, leg, None, tried).await {
            Err(GatewayError::Upstream(e))
                if e.is_disconnect() && migrations < relay.reliability.migration_limit =>
            {
                migrations += 1;
                relay
                    .metrics
                    .migrations
                    .with_label_values(&["continued"])
                    .inc();
                tracing::warn!(rid = %spec.rid, worker = e.worker_url().unwrap_or("-"), error = %e, "worker failed before its first token; starting elsewhere");
                died = Some(e);
            }
            other => {
                let opened = match (other, died.take()) {
                    (Err(GatewayError::Route(_)), Some(e)) => Err(GatewayError::Upstream(e)),
                    (other, _) => other,
                };
                return (opened, migrations);
            }
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.exchange.ended() {
            // The client left: what the worker generates until our abort lands is counted
            // (the exchange records the 499 when it drops, right after this).
            self.upstream.count_leftover(
                self.exchange
                    .relay()
                    .metrics
                    .tokens_after_client_left
                    .clone(),
            );
        }
    }
}
