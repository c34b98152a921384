//! The inference handlers' futures stay small. axum and tower move a handler's future several
//! times per request, each move a `memcpy` of its whole size; the request's own state machine
//! (~14 KiB for a chat request) is boxed once instead (`dispatch::respond`). Unboxed, the chat
//! handler's future was ~29 KiB and `memmove` a tenth of the gateway's CPU per request.

use std::mem::size_of_val;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use switchboard::config::ServeConfig;
use switchboard::server::body::JsonBytes;
use switchboard::server::handlers::{generate, messages, openai};

use super::NO_WORKER;

/// Far below the boxed body's size, with room for the handlers' own few fields to grow.
const SMALL: usize = 2048;

#[tokio::test]
async fn every_inference_handler_s_future_is_small() {
    let config = ServeConfig::from_args(["--worker-urls", NO_WORKER]).expect("config");
    let app = Arc::new(switchboard::gateway::build_state(config).expect("gateway state"));
    let (state, headers, body) = (
        || State(Arc::clone(&app)),
        HeaderMap::new,
        || JsonBytes(Bytes::new()),
    );
    // Created, measured and dropped, never polled.
    let sizes = [
        (
            "chat",
            size_of_val(&openai::chat(state(), headers(), body())),
        ),
        (
            "completions",
            size_of_val(&openai::completions(state(), headers(), body())),
        ),
        (
            "generate",
            size_of_val(&generate::generate(state(), headers(), body())),
        ),
        (
            "messages",
            size_of_val(&messages::messages(state(), headers(), body())),
        ),
        (
            "responses",
            size_of_val(&messages::responses(state(), headers(), body())),
        ),
    ];
    for (name, size) in sizes {
        assert!(size <= SMALL, "{name}'s future is {size} bytes: {sizes:?}");
    }
}
