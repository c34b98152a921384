//! `/v1/completions`: one prompt or a batch (texts or id lists), each tokenized once and
//! checked against the context; `n` generations per prompt.

use super::fields::{check_extensions, check_openai_ranges, MAX_GENERATIONS};
use super::{
    check_model, check_text_fits, finish, room_for, structured_output, BatchPrompt, Prepared,
};
use crate::error::GatewayError;
use crate::model::Model;
use crate::protocol::openai::{CompletionRequest, Prompt};
use crate::protocol::sampling::{invalid, requested_max_tokens};

pub fn completion(model: &Model, req: &CompletionRequest) -> Result<Prepared, GatewayError> {
    check_model(model, &req.model)?;
    let logit_bias =
        check_openai_ranges(model, req.logprobs, 5, "logprobs", req.logit_bias.as_ref())?;
    check_extensions(&req.extensions)?;
    // SGLang's completions route ignores `suffix`: refused rather than dropped.
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(invalid(
            "suffix",
            "suffix (insertion) is not supported by this model server",
        )
        .into());
    }
    if req.echo == Some(true) && req.logprobs.is_some() {
        return Err(invalid(
            "echo",
            "echo with logprobs needs the prompt's logprobs: use /generate with return_logprob and logprob_start_len",
        )
        .into());
    }
    check_best_of(req)?;
    let encode = |t: &str| {
        check_text_fits(model, t.len())?;
        Ok::<_, GatewayError>(model.tokenizer.encode(t, true)?)
    };
    let prompts: Vec<Vec<u32>> = match &req.prompt {
        Prompt::Text(t) => vec![encode(t)?],
        Prompt::Ids(ids) => vec![check_ids(model, ids.clone())?],
        Prompt::Texts(ts) => {
            check_batch(ts.len(), req)?;
            ts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?
        }
        Prompt::IdBatches(b) => {
            check_batch(b.len(), req)?;
            b.iter()
                .map(|ids| check_ids(model, ids.clone()))
                .collect::<Result<_, _>>()?
        }
    };
    // OpenAI's completions default is 16 tokens.
    let max = req.sampling.max_tokens.or(Some(16));
    let mut prompts = prompts.into_iter();
    let first = prompts.next().ok_or_else(empty)?;
    let mut p = finish(
        model,
        first,
        &req.sampling,
        max,
        "max_tokens",
        req.stream,
        req.stream_options.is_some_and(|o| o.include_usage),
    )?;
    p.params.logit_bias = logit_bias;
    structured_output(
        &mut p.params,
        req.response_format.as_ref(),
        req.json_schema.as_deref(),
    )?;
    // Every prompt gets the same sampling parameters: each must leave room for them.
    let max_tokens = requested_max_tokens("max_tokens", max, model.context_length)?;
    let mut batch = Vec::with_capacity(prompts.len());
    for (i, ids) in prompts.enumerate() {
        room_for(model, &ids, max_tokens)?;
        let echo = echo_text(model, req, i + 1, &ids)?;
        batch.push(BatchPrompt { ids, echo });
    }
    let echo = echo_text(model, req, 0, &p.prompt_ids)?;
    Ok(Prepared {
        user: req.user.clone(),
        logprobs: req.logprobs.map(u32::from),
        echo,
        batch,
        ..p
    })
}

fn empty() -> GatewayError {
    invalid("prompt", "prompt must not be empty").into()
}

/// A batch is not empty, and its generations (prompts × `n`) stay within
/// [`MAX_GENERATIONS`].
fn check_batch(prompts: usize, req: &CompletionRequest) -> Result<(), GatewayError> {
    if prompts == 0 {
        return Err(empty());
    }
    let n = req.sampling.n.unwrap_or(1).max(1) as usize;
    if prompts.saturating_mul(n) > MAX_GENERATIONS {
        return Err(invalid(
            "prompt",
            format!("{prompts} prompts with n = {n} make more than {MAX_GENERATIONS} generations"),
        )
        .into());
    }
    Ok(())
}

/// SGLang's completions route ignores `best_of`; generating `best_of` and answering the `n`
/// best is not something any worker does, so only a `best_of` that asks for nothing more
/// than `n` is taken.
fn check_best_of(req: &CompletionRequest) -> Result<(), GatewayError> {
    let n = req.sampling.n.unwrap_or(1).max(1);
    match req.best_of {
        None | Some(0 | 1) => Ok(()),
        Some(b) if i64::from(b) == n => Ok(()),
        Some(b) => Err(invalid(
            "best_of",
            format!("best_of ({b}) other than n ({n}) is not supported by this model server: ask for n choices instead"),
        )
        .into()),
    }
}

/// As SGLang's `_get_echo_text`: prompt `i`'s text as sent, ids decoded without special
/// tokens; `None` without `echo`.
fn echo_text(
    model: &Model,
    req: &CompletionRequest,
    i: usize,
    ids: &[u32],
) -> Result<Option<String>, GatewayError> {
    Ok(match (&req.prompt, req.echo) {
        (_, None | Some(false)) => None,
        (Prompt::Text(t), _) => Some(t.clone()),
        (Prompt::Texts(ts), _) => ts.get(i).cloned(),
        (_, _) => Some(model.tokenizer.decode(ids, true)?),
    })
}

fn check_ids(model: &Model, ids: Vec<u32>) -> Result<Vec<u32>, GatewayError> {
    let vocab = model.tokenizer.vocab_size() as u32;
    match ids.iter().find(|&&t| t >= vocab) {
        Some(t) => Err(invalid(
            "prompt",
            format!("token id {t} is outside the vocabulary (size {vocab})"),
        )
        .into()),
        None => Ok(ids),
    }
}
