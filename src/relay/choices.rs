//! A request with several generations: `n > 1` (SGLang's parallel sampling) and completions'
//! batched prompts. As SGLang's tokenizer manager fans such a request out, each generation is
//! its own worker request with its own rid (`<rid>-c<index>`), so each is aborted, retried and
//! migrated on its own by the one exchange core ([`Generation`]); choice `index` is
//! `prompt * n + sample`, as SGLang numbers them.
//!
//! The first generation is routed by the policy on its prompt's ids; once its first token is
//! in hand (its prompt then cached there, as SGLang's warm-up request caches it before the
//! fan-out), the others go to the same worker (or PD pair) while it can take them, each with
//! its own load booking. Nothing is answered before every generation has its first token, so a
//! failure up to then is still an HTTP error, and the retry rules stay "before the first byte".
//!
//! The request's one [`Exchange`] records its ending, latency and counts (the generations'
//! own record nothing): usage counts each prompt once and sums the completions
//! (`UsageProcessor`); latency is the first choice's.

mod answer;

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::exchange::{Exchange, Usage};
use super::generation::Spec;
use super::reliability::Deadlines;
use super::{Generation, Relay};
use crate::error::GatewayError;
use crate::metrics::Endpoint;
use crate::upstream::generate::Delta;
use crate::upstream::UpstreamError;

pub use answer::{collect, stream};

/// One step of one choice: its index, the generation (to be polled again), what it gave.
type Step = (usize, Box<Generation>, Result<Option<Delta>, UpstreamError>);

pub struct Choices {
    /// The request's exchange: no leg of its own, its record is the request's.
    record: Exchange,
    /// Generations per prompt (the request's `n`).
    n: usize,
    running: FuturesUnordered<BoxFuture<'static, Step>>,
    /// Each choice's counts, as of its last step.
    counts: Vec<Usage>,
}

impl Choices {
    /// Starts every generation (`specs` in choice order, `n` per prompt); returns once each has
    /// its first token.
    pub async fn start(
        relay: &Arc<Relay>,
        specs: Vec<Spec>,
        n: usize,
        endpoint: Endpoint,
        start: Instant,
    ) -> Result<Choices, GatewayError> {
        let mut record = Exchange::new(relay, endpoint, start);
        let k = specs.len();
        let mut specs = specs.into_iter();
        let Some(first) = specs.next() else {
            record.hand_back();
            return Err(GatewayError::invalid_body(
                "no prompt to generate for",
                None,
            ));
        };
        let first = match Generation::start_part(relay, first, endpoint, start).await {
            Ok(g) => g,
            Err(e) => {
                record.hand_back();
                return Err(e);
            }
        };
        record.set_predicted_cached(first.predicted_cached());
        let prefer = first.placement();
        let rest = specs.map(|mut spec| {
            spec.prefer = prefer;
            Generation::start_part(relay, spec, endpoint, start)
        });
        // The first failure drops the others: their legs release their load and abort.
        let rest = match futures_util::future::try_join_all(rest).await {
            Ok(rest) => rest,
            Err(e) => {
                record.hand_back();
                return Err(e);
            }
        };
        let mut choices = Choices {
            record,
            n: n.max(1),
            running: FuturesUnordered::new(),
            counts: vec![Usage::default(); k],
        };
        for (i, g) in std::iter::once(first).chain(rest).enumerate() {
            choices.poll_next_of(i, g);
        }
        Ok(choices)
    }

    fn poll_next_of(&mut self, index: usize, mut generation: Box<Generation>) {
        self.running.push(Box::pin(async move {
            let got = generation.next().await;
            (index, generation, got)
        }));
    }

    /// The request's time limits.
    pub fn deadlines(&self) -> Deadlines {
        self.record.deadlines()
    }

    pub fn relay(&self) -> &Arc<Relay> {
        self.record.relay()
    }

    /// The request's counts so far, as OpenAI's `usage`.
    pub fn usage(&self) -> crate::protocol::openai::Usage {
        let u = self.record.usage;
        let n = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        crate::protocol::openai::Usage::new(
            n(u.prompt_tokens),
            n(u.completion_tokens),
            n(u.cached_tokens),
        )
    }

    /// The next step of any choice, as it comes: `(index, Ok(Some(delta)))` (the finishing
    /// one last), `(index, Ok(None))` for one that ended without a finish reason. `None` once
    /// every choice ended. An error ends the request: the other generations are aborted.
    pub async fn next(&mut self) -> Option<(usize, Result<Option<Delta>, UpstreamError>)> {
        let (index, generation, got) = self.running.next().await?;
        if let Some(c) = self.counts.get_mut(index) {
            *c = generation.counts();
        }
        self.total();
        match &got {
            Ok(Some(delta)) => {
                // The first choice's tokens time the request (interleaved choices would make
                // every gap look short).
                if index == 0 {
                    self.record.tokens(u64::from(delta.new_tokens));
                }
                match &delta.finish {
                    Some(finish) => self.record.finished_with(finish.openai()),
                    None => self.poll_next_of(index, generation),
                }
            }
            Ok(None) => {}
            Err(e) => {
                self.running.clear();
                self.record.fail(e);
            }
        }
        if self.running.is_empty() {
            self.record.succeed();
        }
        Some((index, got))
    }

    /// The request's counts: each prompt once (its first choice's), the completions summed.
    fn total(&mut self) {
        let mut total = Usage::default();
        for (i, c) in self.counts.iter().enumerate() {
            if i % self.n == 0 {
                total.prompt_tokens += c.prompt_tokens;
                total.cached_tokens += c.cached_tokens;
            }
            total.completion_tokens += c.completion_tokens;
        }
        self.record.usage = total;
    }
}
