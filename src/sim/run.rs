//! One simulated generation from submission to its last token, shared by `/generate` and the
//! OpenAI routes: admission, faults, and the updates each response format is built from. How it
//! starts is in `submit`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::{Progress, Ticket};
use super::pd::{self, KvInfo};
use super::plan::Plan;
use super::state::SimState;
use super::version::SglangVersion;
use crate::protocol::sglang::FinishReason;

mod submit;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    BadRequest(String),
    #[error("The request queue is full.")]
    QueueFull,
    /// A front-end `ValueError` (a duplicate rid in 0.5.23, a DP rank out of range), unlike the
    /// scheduler's refusals above.
    #[error("{0}")]
    FrontEnd(String),
    #[error("injected fault: internal server error")]
    Injected,
}

/// Why a stream ended without its last token.
#[derive(Debug, thiserror::Error)]
pub enum StreamFault {
    #[error("injected fault: connection reset")]
    Die,
}

pub struct Run {
    pub rid: String,
    pub plan: Plan,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    /// Tokens the client has been told about.
    pub produced: usize,
    pub aborted: bool,
    /// Left the waiting queue (its prefill began): an abort now ends a running request.
    admitted: bool,
    ticket: Ticket,
    state: Arc<SimState>,
    started: Instant,
    last_token_at: Option<Instant>,
    stalled: bool,
    /// Tokens the engine produced past a stall fault's count, put out after the stall.
    held_back: Option<usize>,
    /// Past `--fault-die-after-tokens`: the next read resets the connection.
    dying: bool,
    /// The engine finished its prefill (a prefill-only request is then over).
    prefilled: bool,
    /// Engine steps that gave this request tokens (prefill's first token, then one per decode
    /// round): SGLang's `spec_verify_ct` is this less one.
    token_steps: u64,
    /// Streamed to its client: 0.5.23's `is_streaming` metric label.
    streaming: bool,
    /// Reported to `/metrics` as ended (SGLang's tokenizer counts a request when it ends).
    counted: bool,
    /// Its part in a disaggregated pair (`--disaggregation-mode`).
    pd: Option<PdRun>,
    /// Ended by the scheduler with an HTTP status: the message and the status.
    failure: Option<(String, u16)>,
    /// `sampling_params.stream_interval` (SGLang's default, 1, when unset or 0).
    stream_interval: usize,
    /// Tokens the scheduler put out to the front end (its `send_token_offset`).
    scheduler_sent: usize,
}

enum PdRun {
    /// Holds the room's KV once prefilled (on its DP rank), until a decode takes it; or fails
    /// with the KV sender's refusal.
    Prefill {
        room: u64,
        dp_rank: usize,
        handed_over: bool,
        refused: Option<String>,
    },
    /// Waits for the room's KV; the task is stopped when the run goes.
    Decode { transfer: tokio::task::AbortHandle },
}

impl Drop for Run {
    fn drop(&mut self) {
        // Aborted while running, or its client left: SGLang counts it as it ends.
        self.count_finished();
        match &self.pd {
            Some(PdRun::Prefill {
                room,
                handed_over: false,
                ..
            }) => self.state.pd.rooms.forget(*room),
            Some(PdRun::Decode { transfer }) => transfer.abort(),
            _ => {}
        }
    }
}

pub struct Update {
    /// New tokens since the previous update (several when the reader fell behind).
    pub new_tokens: usize,
    pub finished: bool,
}

impl Run {
    /// Waits for the next tokens. `None` once the run is over (finished or aborted).
    pub async fn next(&mut self) -> Result<Option<Update>, StreamFault> {
        if self.dying {
            // A pause first, so the tokens before the fault are flushed to the client (hyper
            // drops buffered bytes when a body errors); then the connection breaks.
            tokio::time::sleep(Duration::from_millis(50)).await;
            return Err(StreamFault::Die);
        }
        if self.finished() || self.aborted {
            return Ok(None);
        }
        let faults = self.state.faults.get();
        if !self.stalled && faults.stall_secs > 0.0 && self.produced >= faults.stall_after_tokens {
            self.stalled = true;
            tokio::time::sleep(Duration::from_secs_f64(faults.stall_secs)).await;
        }
        let mut latest = self.held_back.take();
        if latest.is_none() {
            let Some(first) = self.ticket.events.recv().await else {
                self.aborted = true;
                return Ok(None);
            };
            self.apply(first, &mut latest);
        }
        // Collapse whatever else is queued, as SGLang does when its HTTP consumer lags.
        while let Ok(p) = self.ticket.events.try_recv() {
            self.apply(p, &mut latest);
        }
        if self.aborted {
            self.state.metrics.aborted.inc();
            return Ok(None);
        }
        let Some(produced) = latest else {
            return Box::pin(self.next()).await; // only a Started event so far
        };
        let die = faults.die_after_tokens.filter(|&n| produced > n);
        let mut produced = die.map_or(produced, |n| n);
        // The engine may have outrun this stream: a stall fault still comes after its count.
        let stall_at = faults.stall_after_tokens;
        if !self.stalled && faults.stall_secs > 0.0 && produced > stall_at {
            self.held_back = Some(produced);
            produced = stall_at.max(self.produced);
        }
        let new_tokens = produced - self.produced;
        self.record_latency(new_tokens);
        self.produced = produced;
        if self.finished() && (new_tokens > 0 || self.plan.is_empty()) {
            if let Err(message) = self.hand_over_kv().await {
                self.failure = Some((message, 500));
                self.aborted = true;
                return Ok(None);
            }
            // Counted once the last token is known, as SGLang does when a request finishes.
            self.count_finished();
            self.state
                .metrics
                .finished_verify_rounds(self.token_steps.saturating_sub(1));
        }
        if die.is_some() {
            // The tokens up to the limit still go out; the connection breaks on the next read.
            self.dying = true;
            if new_tokens == 0 {
                return Err(StreamFault::Die);
            }
        }
        Ok(Some(Update {
            new_tokens,
            finished: self.finished(),
        }))
    }

    fn apply(&mut self, p: Progress, latest: &mut Option<usize>) {
        match p {
            Progress::Started { cached_tokens } => {
                self.admitted = true;
                self.cached_tokens = cached_tokens;
            }
            Progress::Tokens { produced, finished } => {
                self.prefilled = true;
                self.token_steps += 1;
                if finished || !self.streaming || self.step_streams(produced) {
                    self.scheduler_sent = produced;
                    *latest = Some(produced);
                }
            }
            Progress::Aborted => self.aborted = true,
            Progress::Failed { message, status } => {
                self.failure = Some((message, status));
                self.aborted = true;
            }
        }
    }

    /// Whether a streamed request's step that brought its output to `produced` tokens is put
    /// out, under its `stream_interval` k (the last step always is).
    fn step_streams(&self, produced: usize) -> bool {
        let k = self.stream_interval;
        match self.state.version {
            // `scheduler_output_processor_mixin.py::stream_output_generation`: when the length
            // is 1 more than a multiple of k (the first token, then every k).
            SglangVersion::V0_5_9 => k == 1 || produced % k == 1,
            // `scheduler_components/output_streamer.py::accept`: the first token, then once k
            // tokens are unsent (a speculative step may bring several).
            SglangVersion::V0_5_23 => {
                let unsent = produced.saturating_sub(self.scheduler_sent);
                k == 1 || unsent >= k || (self.scheduler_sent == 0 && unsent > 0)
            }
        }
    }

    /// Prefill role: publishes the room's KV and waits until a decode took it (SGLang answers
    /// a prefill request once its transfer succeeded), or the bootstrap timeout.
    async fn hand_over_kv(&mut self) -> Result<(), String> {
        let Some(PdRun::Prefill {
            room,
            dp_rank,
            handed_over,
            refused,
        }) = &mut self.pd
        else {
            return Ok(());
        };
        if let Some(message) = refused.take() {
            return Err(message);
        }
        let info = KvInfo {
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            dp_rank: *dp_rank,
        };
        let pd = &self.state.pd;
        let taken = pd.rooms.publish(*room, info);
        match tokio::time::timeout(pd.bootstrap_timeout, taken).await {
            Ok(Ok(())) => {
                *handed_over = true;
                Ok(())
            }
            _ => Err(pd::prefill_timeout(
                &self.rid,
                *room,
                pd.bootstrap_timeout.as_secs_f64(),
            )),
        }
    }

    /// Ended by the scheduler with an HTTP status (message, status).
    pub fn failure(&self) -> Option<(&str, u16)> {
        self.failure.as_ref().map(|(m, s)| (m.as_str(), *s))
    }

    fn record_latency(&mut self, new_tokens: usize) {
        if new_tokens == 0 {
            return;
        }
        let now = Instant::now();
        let m = &self.state.metrics;
        match self.last_token_at {
            None => m.first_token((now - self.started).as_secs_f64(), self.streaming),
            Some(prev) => {
                let gap = (now - prev).as_secs_f64() / new_tokens as f64;
                for _ in 0..new_tokens {
                    m.itl.observe(gap);
                }
            }
        }
        self.last_token_at = Some(now);
    }

    /// Every planned token was told; a prefill-only request (`max_new_tokens: 0`, no tokens
    /// planned) once its prefill ran.
    /// Marks the run as streamed to its client (the metrics' `is_streaming` label).
    pub fn set_streaming(&mut self, streaming: bool) {
        self.streaming = streaming;
    }

    /// Reports the run's end to `/metrics` once: finished, or aborted after it left the waiting
    /// queue (SGLang's tokenizer sees the scheduler's abort output then; a request popped from
    /// the waiting queue is not counted).
    fn count_finished(&mut self) {
        if self.counted || !self.admitted {
            return;
        }
        self.counted = true;
        self.state.metrics.finished(&super::metrics::Finished {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.produced,
            cached_tokens: self.cached_tokens,
            e2e_secs: self.e2e_latency(),
            streaming: self.streaming,
        });
    }

    pub fn finished(&self) -> bool {
        self.prefilled && self.produced >= self.plan.len()
    }

    /// Waits for the whole answer (non-streaming requests).
    pub async fn complete(&mut self) -> Result<(), StreamFault> {
        while self.next().await?.is_some() {}
        Ok(())
    }

    pub fn finish_reason(&self) -> Option<FinishReason> {
        if let Some((message, status)) = &self.failure {
            return Some(FinishReason::Abort {
                message: Some(message.clone()),
                status_code: Some(*status),
                err_type: None,
            });
        }
        if self.aborted {
            // The scheduler's two abort paths: popped from the waiting queue (the tokenizer's
            // fallback message), or a running request finished with `FINISH_ABORT()`.
            let message = if self.admitted {
                "Aborted"
            } else {
                "Abort in waiting queue"
            };
            Some(FinishReason::Abort {
                message: Some(message.into()),
                status_code: None,
                err_type: None,
            })
        } else if self.finished() {
            Some(self.plan.finish.clone())
        } else {
            None
        }
    }

    pub fn text(&self) -> &str {
        self.plan.visible(self.produced)
    }

    pub fn output_ids(&self) -> &[u32] {
        &self.plan.output_ids[..self.produced]
    }

    /// Time since the request arrived.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn e2e_latency(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}
