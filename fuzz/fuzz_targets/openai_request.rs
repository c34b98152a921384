//! OpenAI request bodies as the gateway parses and prepares them: `server::body::parse_request`
//! (serde_json + field-accurate errors) → `requested_max_tokens` → `Sampling::to_sglang`, and
//! the OpenAI error body for every rejection. Nothing may panic; what is accepted must be in range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard::error::GatewayError;
use switchboard::protocol::openai::{ChatCompletionRequest, CompletionRequest, Sampling};
use switchboard::protocol::sampling::requested_max_tokens;
use switchboard::server::body::parse_request;

const CONTEXT: usize = 8192;

fn prepare(sampling: &Sampling, max: Option<i64>, param: &'static str) {
    let max_new = match requested_max_tokens(param, max, CONTEXT) {
        Ok(m) => m.unwrap_or(CONTEXT as u32),
        Err(e) => {
            render(e.into());
            return;
        }
    };
    assert!(max_new >= 1 && max_new as usize <= CONTEXT);
    match sampling.to_sglang(max_new) {
        Ok(params) => {
            assert_eq!(params.max_new_tokens, Some(max_new));
            if let Some(t) = params.temperature {
                assert!((0.0..=2.0).contains(&t), "temperature {t} accepted");
            }
            if let Some(k) = params.top_k {
                assert!(k == -1 || k >= 1, "top_k {k} accepted");
            }
            // What goes to the worker must serialise.
            serde_json::to_vec(&params).expect("sampling params serialise");
        }
        Err(e) => render(e.into()),
    }
}

/// Every rejection becomes an OpenAI error body with a message and a 4xx status.
fn render(e: GatewayError) {
    assert!(e.status().is_client_error(), "{e} is not a 4xx");
    let body = e.body();
    assert!(!body.error.message.is_empty());
    serde_json::to_vec(&body).expect("error body serialises");
}

fuzz_target!(|data: &[u8]| {
    match parse_request::<ChatCompletionRequest>(data) {
        Ok(req) => {
            let (max, param) = match req.max_completion_tokens {
                Some(m) => (Some(m), "max_completion_tokens"),
                None => (req.sampling.max_tokens, "max_tokens"),
            };
            prepare(&req.sampling, max, param);
        }
        Err(e) => render(e),
    }
    match parse_request::<CompletionRequest>(data) {
        Ok(req) => prepare(
            &req.sampling,
            req.sampling.max_tokens.or(Some(16)),
            "max_tokens",
        ),
        Err(e) => render(e),
    }
});
