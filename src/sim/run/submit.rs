//! How a run starts: the request recorded, faults and front-end checks, the plan of what it
//! will generate, and its submission to the engine (on its DP rank, with its part in a
//! disaggregated pair).

use std::sync::Arc;
use std::time::Instant;

use super::{PdRun, Run, RunError};
use crate::protocol::sglang::SamplingParams;
use crate::sim::driver::SubmitError;
use crate::sim::engine::Rejection;
use crate::sim::pd::{self, Bootstrap, Mode};
use crate::sim::plan::{self, Plan};
use crate::sim::state::{ReceivedRequest, SimState};

impl Run {
    pub fn start(
        state: &Arc<SimState>,
        route: &'static str,
        rid: String,
        prompt: Vec<u32>,
        params: &SamplingParams,
    ) -> Result<Run, RunError> {
        Run::start_pd(
            state,
            route,
            rid,
            prompt,
            params,
            &Bootstrap::default(),
            None,
        )
    }

    /// [`Run::start`] for a request with its bootstrap fields, which a worker in a
    /// disaggregated role needs, and the DP rank it names.
    pub fn start_pd(
        state: &Arc<SimState>,
        route: &'static str,
        rid: String,
        prompt: Vec<u32>,
        params: &SamplingParams,
        bootstrap: &Bootstrap,
        dp_rank: Option<i64>,
    ) -> Result<Run, RunError> {
        state.metrics.received.inc();
        state.record(ReceivedRequest {
            route,
            rid: rid.clone(),
            input_ids: prompt.clone(),
            max_new_tokens: params.max_new_tokens,
            sampling_params: params.clone(),
            dp_rank,
        });
        if state.faults.should_fail() {
            return Err(RunError::Injected);
        }
        state
            .version
            .check_dp_rank(dp_rank, state.driver.size())
            .map_err(RunError::FrontEnd)?;
        let room = match (state.pd.mode, bootstrap.bootstrap_room) {
            (Mode::Null, _) => None,
            (_, Some(room)) => Some(room),
            (_, None) => return Err(RunError::BadRequest(pd::missing_room(&rid))),
        };
        let prompt_tokens = prompt.len();
        let mut params = params.clone();
        if state.pd.mode == Mode::Prefill {
            // The prefill side computes the first token only (SGLang ends it with length 0).
            params.max_new_tokens = Some(1);
        }
        if params.max_new_tokens.is_none() {
            // Like SGLang's OpenAI routes: no limit means up to the context.
            let room = state.context_length.saturating_sub(prompt_tokens).max(1);
            params.max_new_tokens = Some((room as u32).min(plan::DEFAULT_MAX_NEW_TOKENS));
        }
        let plan = match state.scripts.output_for(&state.tokenizer, &prompt) {
            Some(ids) => Plan::scripted(&state.tokenizer, &state.vocab, ids, &params),
            None => Plan::new(&state.vocab, &prompt, &params, state.eos_probability),
        };
        let (rank, driver) = state.driver.dispatch(dp_rank, room);
        let submitted = match (state.pd.mode, room) {
            (Mode::Decode, Some(room)) => driver
                .submit_awaiting_kv(&rid, &prompt, &plan.output_ids, state.version.same_rid())
                .map(|t| {
                    let asked = pd::Asked {
                        rid: &rid,
                        room,
                        named: dp_rank,
                        bootstrap,
                    };
                    let transfer = pd::await_kv(state, &t, asked, prompt, &plan);
                    (t, Some(PdRun::Decode { transfer }))
                }),
            _ => driver
                .submit(
                    &rid,
                    prompt,
                    plan.output_ids.clone(),
                    state.version.same_rid(),
                )
                .map(|t| {
                    let pd = room.map(|room| PdRun::Prefill {
                        room,
                        dp_rank: rank,
                        handed_over: false,
                        refused: pd::sender_refusal(state, &rid, room, rank, bootstrap),
                    });
                    (t, pd)
                }),
        };
        let (ticket, pd) = submitted.map_err(|r| match r {
            SubmitError::Engine(Rejection::QueueFull) => RunError::QueueFull,
            SubmitError::Engine(other) => RunError::BadRequest(other.to_string()),
            e @ SubmitError::DuplicateRid(_) => RunError::FrontEnd(e.to_string()),
        })?;
        Ok(Run {
            rid,
            plan,
            prompt_tokens,
            cached_tokens: 0,
            produced: 0,
            aborted: false,
            admitted: false,
            ticket,
            state: Arc::clone(state),
            started: Instant::now(),
            last_token_at: None,
            stalled: false,
            held_back: None,
            dying: false,
            prefilled: false,
            token_steps: 0,
            streaming: false,
            counted: false,
            pd,
            failure: None,
            stream_interval: params.stream_interval.map_or(1, |k| k.max(1) as usize),
            scheduler_sent: 0,
        })
    }
}
