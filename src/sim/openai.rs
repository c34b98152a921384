//! The simulator's `/v1/chat/completions` and `/v1/completions`, in SGLang's OpenAI shapes
//! (bare-hex ids, a separate finish chunk for chat, `matched_stop`, usage only when asked).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

mod formats;

use self::formats::{Chat, Text};
use super::dp::RankFields;
use super::logprobs::Logprobs;
use super::parallel;
use super::pd::Bootstrap;
use super::reply::{self, json, run_error, Format};
use super::run::{Run, RunError, Update};
use super::shapes::{CachedTokens, Envelope, ErrorObject, Finish, Usage};
use super::state::{unix_now, SimState};
use super::validate;
use super::version::SglangVersion;
use crate::protocol::openai::{
    ChatCompletionRequest, CompletionRequest, Prompt, Sampling, StreamOptions, WithSampling,
};
use crate::protocol::sampling::requested_max_tokens;
use crate::protocol::sglang::FinishReason;
use crate::stream::sse;
use crate::tokenize::ChatTemplateInput;

fn parse<T: WithSampling>(body: &[u8]) -> Result<T, serde_json::Error> {
    let mut req: T = serde_json::from_slice(body)?;
    req.set_sampling(serde_json::from_slice(body)?, Vec::new());
    Ok(req)
}

/// SGLang accepts a client-chosen `rid` in OpenAI bodies too.
fn rid_of(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Rid {
        rid: Option<String>,
    }
    serde_json::from_slice::<Rid>(body).ok()?.rid
}

/// `serving_base.py::create_error_response`: `type` defaults to `BadRequestError`.
fn oai_error(status: StatusCode, message: &str) -> Response {
    json(
        status,
        &ErrorObject::new(message, "BadRequestError", status.as_u16()),
    )
}

pub async fn chat(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let req: ChatCompletionRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    if req.messages.is_empty() {
        return oai_error(StatusCode::BAD_REQUEST, "messages must not be empty");
    }
    let input = ChatTemplateInput {
        messages: &req.messages,
        tools: req.tools.as_deref(),
        add_generation_prompt: true,
        extra: req.chat_template_kwargs.as_ref(),
    };
    let prompt = match state.tokenizer.render_and_encode(&input) {
        Ok(ids) => ids,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let ask = Ask {
        path: "/v1/chat/completions",
        prompt,
        sampling: &req.sampling,
        max_tokens: req.max_completion_tokens.or(req.sampling.max_tokens),
        rid: rid_of(&body),
        bootstrap: Bootstrap::of(&body),
        dp_rank: RankFields::of(&body).requested(state.version),
        stream: req.stream,
    };
    let logprobs = req
        .logprobs
        .unwrap_or(false)
        .then(|| req.top_logprobs.unwrap_or(0));
    let common = Common::new(&state, req.model, req.stream_options, true, logprobs);
    respond(&state, ask, common, Chat).await
}

pub async fn completions(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let req: CompletionRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let prompt = match req.prompt {
        Prompt::Text(t) => match state.tokenizer.encode(&t, true) {
            Ok(ids) => ids,
            Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.to_string()),
        },
        Prompt::Ids(ids) => ids,
        _ => return oai_error(StatusCode::BAD_REQUEST, "batched prompts are not simulated"),
    };
    let ask = Ask {
        path: "/v1/completions",
        prompt,
        sampling: &req.sampling,
        // OpenAI's completions default.
        max_tokens: req.sampling.max_tokens.or(Some(16)),
        rid: rid_of(&body),
        bootstrap: Bootstrap::of(&body),
        dp_rank: RankFields::of(&body).requested(state.version),
        stream: req.stream,
    };
    let common = Common::new(&state, req.model, req.stream_options, false, req.logprobs);
    respond(&state, ask, common, Text).await
}

/// What both routes pass on once the body is parsed and the prompt encoded.
struct Ask<'a> {
    /// The route, for the request log.
    path: &'static str,
    prompt: Vec<u32>,
    sampling: &'a Sampling,
    max_tokens: Option<i64>,
    rid: Option<String>,
    bootstrap: Bootstrap,
    dp_rank: Option<i64>,
    stream: bool,
}

async fn respond<F: Format>(
    state: &Arc<SimState>,
    ask: Ask<'_>,
    common: Common,
    route: fn(Common) -> F,
) -> Response {
    if ask.prompt.is_empty() {
        return oai_error(StatusCode::BAD_REQUEST, "The prompt is empty.");
    }
    let room = state.context_length.saturating_sub(ask.prompt.len()).max(1) as u32;
    let requested = match requested_max_tokens("max_tokens", ask.max_tokens, state.context_length) {
        Ok(m) => m,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.message),
    };
    // Checked before the stream starts, so a 400 JSON even for a stream; an absent limit means
    // "up to the context" and is not checked (`_validate_one_request`).
    let lengths = validate::lengths(
        state.version,
        ask.prompt.len(),
        requested,
        state.context_length,
    );
    if let Err(message) = lengths {
        return oai_error(StatusCode::BAD_REQUEST, &message);
    }
    let max_new = requested.unwrap_or(room);
    let params = match ask.sampling.to_sglang(max_new) {
        Ok(p) => p,
        Err(e) => return oai_error(StatusCode::BAD_REQUEST, &e.message),
    };
    let n = ask.sampling.n.unwrap_or(1);
    if n > 1 {
        let started = parallel::start(state, &ask.prompt, &params, n, ask.path);
        return match started {
            Ok(runs) => parallel::answer(runs, ask.stream, common, route).await,
            Err(RunError::QueueFull) if ask.stream => queue_full_stream(state),
            Err(e) => run_error(e),
        };
    }
    if n < 1 {
        return oai_error(StatusCode::BAD_REQUEST, "n must be at least 1.");
    }
    let rid = ask
        .rid
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    match Run::start_pd(
        state,
        ask.path,
        rid,
        ask.prompt,
        &params,
        &ask.bootstrap,
        ask.dp_rank,
    ) {
        Ok(run) => reply::answer(run, ask.stream, route(common)).await,
        Err(RunError::QueueFull) if ask.stream => queue_full_stream(state),
        Err(e) => run_error(e),
    }
}

/// A full queue reaches an OpenAI stream after its 200. 0.5.23's `serving_chat` turns the abort
/// into an error event (`create_streaming_error_response`, code 503) and `[DONE]`; 0.5.9's
/// stream handler fails on the abort and the stream is cut without an event or `[DONE]`.
fn queue_full_stream(state: &SimState) -> Response {
    match state.version {
        SglangVersion::V0_5_9 => reply::cut_stream(),
        SglangVersion::V0_5_23 => {
            let error = ErrorObject::new("The request queue is full.", "SERVICE_UNAVAILABLE", 503);
            let mut out = Vec::new();
            sse::write_json_event(&mut out, &serde_json::json!({ "error": error }));
            reply::sse_once(out)
        }
    }
}

/// What both OpenAI formats keep: the fields every object repeats, and the text already sent.
#[derive(Clone)]
pub(super) struct Common {
    pub(super) model: String,
    pub(super) created: u64,
    cache_report: bool,
    pub(super) include_usage: bool,
    sent: usize,
    /// The choice this format writes (`n > 1`: one format per choice).
    pub(super) index: u32,
    /// One of `n > 1` choices: chat's finish chunks and any usage chunk are left to
    /// [`parallel`], which writes them once every choice is done.
    pub(super) parallel: bool,
    /// `/v1/chat/completions` rather than `/v1/completions`.
    pub(super) chat: bool,
    logprobs: Option<Logprobs>,
}

impl Common {
    fn new(
        state: &SimState,
        model: String,
        options: Option<StreamOptions>,
        chat: bool,
        top_logprobs: Option<u8>,
    ) -> Common {
        Common {
            model,
            created: unix_now(),
            cache_report: state.cache_report,
            include_usage: options.is_some_and(|o| o.include_usage),
            sent: 0,
            index: 0,
            parallel: false,
            chat,
            logprobs: top_logprobs
                .map(|k| Logprobs::new(Arc::clone(&state.tokenizer), k.into(), chat)),
        }
    }

    fn envelope<'a, C>(
        &'a self,
        run: &'a Run,
        object: &'static str,
        choices: Vec<C>,
        usage: Option<Option<Usage>>,
    ) -> Envelope<'a, C> {
        Envelope {
            id: &run.rid,
            object,
            created: self.created,
            model: &self.model,
            choices,
            usage,
        }
    }

    fn usage(&self, run: &Run) -> Usage {
        self.usage_of(run.prompt_tokens, run.cached_tokens, run.produced)
    }

    pub(super) fn usage_of(&self, prompt: usize, cached: usize, produced: usize) -> Usage {
        Usage {
            prompt_tokens: prompt,
            total_tokens: prompt + produced,
            completion_tokens: produced,
            prompt_tokens_details: self.cache_report.then_some(CachedTokens {
                cached_tokens: cached,
            }),
            reasoning_tokens: 0,
            completion_tokens_details: None,
        }
    }

    /// The text since the previous update, which now counts as sent.
    fn new_text<'r>(&mut self, run: &'r Run) -> &'r str {
        let text = &run.text()[self.sent.min(run.text().len())..];
        self.sent = run.text().len();
        text
    }

    /// The logprobs of the whole output, when asked.
    fn all_logprobs(&self, run: &Run) -> Option<Value> {
        Some(self.logprobs.as_ref()?.value(run.output_ids(), 0))
    }

    /// The logprobs of an update's new tokens, when asked.
    fn new_logprobs(&self, run: &Run, update: &Update) -> Option<Value> {
        let first = run.produced.saturating_sub(update.new_tokens);
        let ids = run.output_ids().get(first..)?;
        Some(self.logprobs.as_ref()?.value(ids, first))
    }

    /// The usage chunk that ends a stream when the client asked for it: no choices.
    fn write_usage(&self, run: &Run, object: &'static str, out: &mut Vec<u8>) {
        let usage = Some(Some(self.usage(run)));
        sse::write_json_event(out, &self.envelope::<()>(run, object, Vec::new(), usage));
    }
}

pub(super) fn finish(run: &Run) -> Finish {
    match run.finish_reason() {
        Some(FinishReason::Stop { matched }) => Finish {
            finish_reason: Some("stop"),
            matched_stop: matched,
        },
        Some(f) => Finish {
            finish_reason: Some(f.openai()),
            matched_stop: None,
        },
        None => Finish::default(),
    }
}
