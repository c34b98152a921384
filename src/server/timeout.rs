//! `--request-timeout-secs`: a request that has not started its response by then gets a 504.
//! (A response already streaming is bounded by the worker's own progress, not cut here.)

use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::GatewayError;
use crate::upstream::UpstreamError;

pub async fn until_response(limit: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => GatewayError::Upstream(UpstreamError::Timeout {
            url: "(any)".into(),
            stage: "request timeout",
        })
        .into_response(),
    }
}
