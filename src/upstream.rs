//! Talking to workers: the pooled HTTP client, SGLang's native `/generate`, OpenAI-compatible
//! passthrough, SGLang's gRPC service for `grpc://` workers (`grpc`), and aborting a worker's
//! request. The one place that reads a failure's status
//! number: everything above asks the error whether a retry is safe and whose fault it was.

pub mod abort;
pub mod client;
pub mod first_event;
pub mod generate;
pub mod grpc;
pub mod origin;
pub mod pool;
pub mod tokens;

use axum::http::StatusCode;

pub use client::Client;
pub use origin::Origin;
pub use pool::Body;

/// How long a worker (HTTP or gRPC) may go on generating after the client left, until our abort
/// lands, before we stop counting its leftover tokens.
const LEFTOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the worker may have begun the generation when the failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// Provably not (refused the connection, or said it is too busy): safe to run elsewhere.
    No,
    /// The connection broke before any answer; the worker is told to abort the rid, so running
    /// it elsewhere still runs it once.
    Unknown,
    /// It may be generating (or finished): never sent again.
    Maybe,
}

/// Whose fault a failure was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The worker looks broken: counts towards its circuit breaker.
    Worker,
    /// The worker is healthy but full (503, 429, queue full).
    Busy,
    /// The worker refused the request itself (4xx): the client's to fix.
    Request,
    /// Nobody's in particular (a keep-alive race, an abort we asked for).
    Transient,
}

/// The messages never name the worker: they reach clients, who must not learn the fleet's
/// addresses. `url` is for the logs (`worker_url`) and the admin routes.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot reach the worker: {reason}")]
    Connect { url: String, reason: String },
    #[error("the worker did not answer in time ({stage})")]
    Timeout { url: String, stage: &'static str },
    #[error("{message}")]
    Status {
        url: String,
        status: StatusCode,
        message: String,
        retry_after: Option<u64>,
    },
    #[error("the worker sent an invalid response: {reason}")]
    Protocol { url: String, reason: String },
    #[error("the worker broke off the response: {reason}")]
    Disconnected { url: String, reason: String },
    #[error("the worker closed the connection before answering: {reason}")]
    NoResponse { url: String, reason: String },
    #[error("the worker aborted the generation: {message}")]
    Aborted {
        message: String,
        status: Option<u16>,
    },
}

impl UpstreamError {
    /// The worker it happened on, for the logs; never shown to clients.
    pub fn worker_url(&self) -> Option<&str> {
        match self {
            UpstreamError::Connect { url, .. }
            | UpstreamError::Timeout { url, .. }
            | UpstreamError::Status { url, .. }
            | UpstreamError::Protocol { url, .. }
            | UpstreamError::Disconnected { url, .. }
            | UpstreamError::NoResponse { url, .. } => Some(url),
            UpstreamError::Aborted { .. } => None,
        }
    }

    /// The message for the client: the worker's own text (an error body, a library's reason)
    /// may name its address too, which is replaced by "worker".
    pub fn client_message(&self) -> String {
        let message = self.to_string();
        let Some(url) = self.worker_url() else {
            return message;
        };
        let authority = url
            .split_once("://")
            .map_or(url, |(_, rest)| rest)
            .trim_end_matches('/');
        [url, authority]
            .into_iter()
            .filter(|s| !s.is_empty())
            .fold(message, |m, s| m.replace(s, "worker"))
    }

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
            // The worker refused the client's own input (an error event in its stream).
            UpstreamError::Aborted {
                status: Some(400..=499),
                ..
            } => ("invalid_request_error", None),
            UpstreamError::Aborted { .. } => ("upstream_error", Some("generation_aborted")),
            _ => ("upstream_error", Some("upstream_error")),
        }
    }

    pub fn fault(&self) -> Fault {
        match self {
            UpstreamError::Connect { .. }
            | UpstreamError::Timeout { .. }
            | UpstreamError::Protocol { .. }
            | UpstreamError::Disconnected { .. } => Fault::Worker,
            // Usually a keep-alive race on the worker's side, not a broken worker.
            UpstreamError::NoResponse { .. } => Fault::Transient,
            UpstreamError::Status { status, .. } => status_fault(status.as_u16()),
            UpstreamError::Aborted {
                status: Some(s), ..
            } if busy(*s) || (400..500).contains(s) => status_fault(*s),
            UpstreamError::Aborted { .. } => Fault::Transient,
        }
    }

    pub fn started(&self) -> Started {
        match self {
            UpstreamError::Connect { .. } => Started::No,
            UpstreamError::Status { status, .. } if busy(status.as_u16()) => Started::No,
            UpstreamError::Aborted {
                status: Some(s), ..
            } if busy(*s) => Started::No,
            UpstreamError::NoResponse { .. } => Started::Unknown,
            _ => Started::Maybe,
        }
    }

    /// The request may go to another worker: this one did not (or cannot go on to) run it.
    pub fn may_retry(&self) -> bool {
        self.started() != Started::Maybe
    }

    /// The worker died during the generation: what was relayed so far can be continued elsewhere.
    pub fn is_disconnect(&self) -> bool {
        matches!(self, UpstreamError::Disconnected { .. })
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

/// Refusals that mean "full, try elsewhere" before any work was done.
fn busy(status: u16) -> bool {
    status == 503 || status == 429
}

fn status_fault(status: u16) -> Fault {
    match status {
        s if busy(s) => Fault::Busy,
        400..=499 => Fault::Request,
        500..=599 => Fault::Worker,
        _ => Fault::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> UpstreamError {
        UpstreamError::Status {
            url: "http://10.0.0.1:8000".into(),
            status: StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
            message: String::new(),
            retry_after: None,
        }
    }

    #[test]
    fn classification() {
        let connect = UpstreamError::Connect {
            url: "u".into(),
            reason: "refused".into(),
        };
        assert_eq!(
            (connect.started(), connect.fault()),
            (Started::No, Fault::Worker)
        );
        assert_eq!(
            (status(503).started(), status(503).fault()),
            (Started::No, Fault::Busy)
        );
        assert_eq!(status(429).started(), Started::No);
        // A 500 may come after the worker started: never retried.
        assert_eq!(
            (status(500).started(), status(500).fault()),
            (Started::Maybe, Fault::Worker)
        );
        assert!(!status(500).may_retry());
        assert_eq!(status(400).fault(), Fault::Request);
        let queue_full = UpstreamError::Aborted {
            message: "queue full".into(),
            status: Some(503),
        };
        assert!(queue_full.may_retry());
        assert_eq!(queue_full.fault(), Fault::Busy);
        let raced = UpstreamError::NoResponse {
            url: "u".into(),
            reason: "closed".into(),
        };
        assert_eq!(
            (raced.started(), raced.fault()),
            (Started::Unknown, Fault::Transient)
        );
        assert!(raced.may_retry());
    }

    #[test]
    fn client_messages_name_no_worker_address() {
        let url = "http://10.0.0.1:8000";
        let errors = [
            UpstreamError::Connect {
                url: url.into(),
                reason: "tcp connect error: Connection refused".into(),
            },
            UpstreamError::Timeout {
                url: url.into(),
                stage: "first token",
            },
            UpstreamError::Status {
                url: url.into(),
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: "worker answered 500: crashed at 10.0.0.1:8000".into(),
                retry_after: None,
            },
            UpstreamError::Disconnected {
                url: url.into(),
                reason: format!("reset by {url}/generate"),
            },
        ];
        for e in errors {
            let shown = e.client_message();
            assert!(!shown.contains("10.0.0.1"), "{shown}");
            assert!(shown.contains("worker"), "{shown}");
            assert_eq!(e.worker_url(), Some(url));
        }
    }
}
