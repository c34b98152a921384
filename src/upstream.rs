//! Talking to workers: the pooled HTTP client, SGLang's native `/generate`, OpenAI-compatible
//! passthrough, and aborting a worker's request.

pub mod abort;
pub mod client;
pub mod generate;

use axum::http::StatusCode;

pub use client::Client;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot reach worker {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("worker {url} did not answer in time ({stage})")]
    Timeout { url: String, stage: &'static str },
    #[error("{message}")]
    Status {
        status: StatusCode,
        message: String,
        retry_after: Option<u64>,
    },
    #[error("worker {url} sent an invalid response: {reason}")]
    Protocol { url: String, reason: String },
    #[error("worker {url} broke off the response: {reason}")]
    Disconnected { url: String, reason: String },
    #[error("worker {url} closed the connection before answering: {reason}")]
    NoResponse { url: String, reason: String },
    #[error("the worker aborted the generation: {message}")]
    Aborted {
        message: String,
        status: Option<u16>,
    },
}

impl UpstreamError {
    /// The status a client sees when this happens before its response started.
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Protocol { .. }
            | UpstreamError::Disconnected { .. }
            | UpstreamError::NoResponse { .. } => StatusCode::BAD_GATEWAY,
            UpstreamError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            UpstreamError::Status { status, .. } if status.is_client_error() => *status,
            UpstreamError::Status { status, .. } if *status == StatusCode::SERVICE_UNAVAILABLE => {
                *status
            }
            UpstreamError::Status { .. } => StatusCode::BAD_GATEWAY,
            UpstreamError::Aborted {
                status: Some(code), ..
            } => StatusCode::from_u16(*code)
                .ok()
                .filter(|s| s.is_client_error() || s.is_server_error())
                .unwrap_or(StatusCode::BAD_GATEWAY),
            UpstreamError::Aborted { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    pub fn kind_and_code(&self) -> (&'static str, Option<&'static str>) {
        match self {
            UpstreamError::Status { status, .. } if status.is_client_error() => {
                ("invalid_request_error", None)
            }
            UpstreamError::Timeout { .. } => ("timeout", Some("upstream_timeout")),
            UpstreamError::Connect { .. } => ("upstream_error", Some("upstream_unreachable")),
            UpstreamError::Aborted { .. } => ("upstream_error", Some("generation_aborted")),
            _ => ("upstream_error", Some("upstream_error")),
        }
    }

    /// The worker looks broken (as opposed to busy, or refusing a bad request): counts
    /// towards its circuit breaker.
    pub fn is_worker_fault(&self) -> bool {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Timeout { .. }
            | UpstreamError::Protocol { .. }
            | UpstreamError::Disconnected { .. } => true,
            // Usually a keep-alive race on the worker's side, not a broken worker.
            UpstreamError::NoResponse { .. } => false,
            UpstreamError::Status { status, .. } => {
                status.is_server_error() && *status != StatusCode::SERVICE_UNAVAILABLE
            }
            UpstreamError::Aborted { .. } => false,
        }
    }

    /// A short, bounded label for the upstream-errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            UpstreamError::Connect { .. } => "connect",
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Status { .. } => "status",
            UpstreamError::Protocol { .. } => "protocol",
            UpstreamError::Disconnected { .. } => "disconnected",
            UpstreamError::NoResponse { .. } => "no_response",
            UpstreamError::Aborted { .. } => "aborted",
        }
    }
}
