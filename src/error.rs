//! Every error a client can see, rendered once, as OpenAI does:
//! `{"error":{"message","type","param","code"}}` with the matching HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::protocol::openai::{ErrorBody, ErrorDetail};
use crate::protocol::sampling::InvalidField;
use crate::routing::RouteError;
use crate::tokenize::TokenizeError;
use crate::upstream::UpstreamError;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    InvalidField(#[from] InvalidField),
    #[error("{message}")]
    InvalidBody {
        message: String,
        param: Option<String>,
    },
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// See `server::limits`.
    #[error("request body has more than {limit} JSON values; a prompt can use at most the context length in tokens")]
    TooManyJsonItems { limit: usize },
    #[error("The model '{0}' does not exist")]
    ModelNotFound(String),
    #[error("This model's maximum context length is {context_length} tokens. However, you requested {requested} tokens ({prompt_tokens} in the prompt, {max_tokens} for the completion). Please reduce the length of the prompt or the completion.")]
    ContextLength {
        context_length: usize,
        requested: usize,
        prompt_tokens: usize,
        max_tokens: usize,
    },
    #[error("This model's maximum context length is {context_length} tokens, and the prompt's {bytes} bytes of text cannot fit in it. Please reduce the length of the prompt.")]
    PromptTextTooLong { bytes: usize, context_length: usize },
    #[error(transparent)]
    Tokenize(#[from] TokenizeError),
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A request only an HTTP worker can serve (one forwarded to its own route as it is, see
    /// `prepare`; logprobs, which gRPC workers are not asked for yet), and no HTTP worker.
    #[error("this request needs an HTTP worker ({route}), and every worker is a gRPC worker: add an http:// worker, or leave out what needs one (logprobs, n > 1, a batch, …)")]
    NeedsHttpWorker { route: &'static str },
    #[error("Incorrect API key provided")]
    Unauthorized,
    #[error("not found")]
    NotFound,
    #[error("this route does not accept that HTTP method")]
    MethodNotAllowed,
    #[error("this route needs the admin API key")]
    Forbidden,
    /// Admission control (`admission`) refused the request: 429 with `Retry-After`.
    #[error("{reason}")]
    TooManyRequests {
        reason: String,
        code: &'static str,
        retry_after_secs: u64,
    },
}

impl GatewayError {
    pub fn invalid_body(message: impl Into<String>, param: Option<String>) -> GatewayError {
        GatewayError::InvalidBody {
            message: message.into(),
            param,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::InvalidField(_)
            | GatewayError::InvalidBody { .. }
            | GatewayError::ContextLength { .. }
            | GatewayError::PromptTextTooLong { .. }
            | GatewayError::NeedsHttpWorker { .. } => StatusCode::BAD_REQUEST,
            GatewayError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            GatewayError::PayloadTooLarge { .. } | GatewayError::TooManyJsonItems { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            GatewayError::ModelNotFound(_) | GatewayError::NotFound => StatusCode::NOT_FOUND,
            GatewayError::Tokenize(e) if e.is_client_error() => StatusCode::BAD_REQUEST,
            GatewayError::Tokenize(_) => StatusCode::INTERNAL_SERVER_ERROR,
            GatewayError::Route(_) => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::Upstream(e) => e.status(),
            GatewayError::Unauthorized => StatusCode::UNAUTHORIZED,
            GatewayError::Forbidden => StatusCode::FORBIDDEN,
            GatewayError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            GatewayError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// OpenAI's `type` and `code` for this error.
    fn kind_and_code(&self) -> (&'static str, Option<&'static str>) {
        match self {
            GatewayError::ModelNotFound(_) => ("invalid_request_error", Some("model_not_found")),
            GatewayError::ContextLength { .. } | GatewayError::PromptTextTooLong { .. } => {
                ("invalid_request_error", Some("context_length_exceeded"))
            }
            GatewayError::Unauthorized => ("invalid_request_error", Some("invalid_api_key")),
            GatewayError::PayloadTooLarge { .. } | GatewayError::TooManyJsonItems { .. } => {
                ("invalid_request_error", Some("payload_too_large"))
            }
            GatewayError::NotFound => ("invalid_request_error", Some("not_found")),
            GatewayError::NeedsHttpWorker { .. } => {
                ("invalid_request_error", Some("unsupported_on_grpc_workers"))
            }
            GatewayError::Forbidden => ("invalid_request_error", Some("forbidden")),
            GatewayError::MethodNotAllowed => ("invalid_request_error", Some("method_not_allowed")),
            GatewayError::Route(_) => ("service_unavailable", Some("no_worker_available")),
            GatewayError::Upstream(e) => e.kind_and_code(),
            GatewayError::TooManyRequests { code, .. } => ("rate_limit_exceeded", Some(code)),
            e if e.status().is_server_error() => ("internal_error", None),
            _ => ("invalid_request_error", None),
        }
    }

    fn param(&self) -> Option<String> {
        match self {
            GatewayError::InvalidField(f) => Some(f.param.to_owned()),
            GatewayError::InvalidBody { param, .. } => param.clone(),
            GatewayError::ModelNotFound(_) => Some("model".to_owned()),
            GatewayError::ContextLength { .. } | GatewayError::PromptTextTooLong { .. } => {
                Some("messages".to_owned())
            }
            _ => None,
        }
    }

    /// What the client reads: never a worker's address (that goes to the logs only).
    fn client_message(&self) -> String {
        match self {
            GatewayError::Upstream(e) => e.client_message(),
            other => other.to_string(),
        }
    }

    pub fn body(&self) -> ErrorBody {
        let (kind, code) = self.kind_and_code();
        ErrorBody {
            error: ErrorDetail {
                message: self.client_message(),
                kind: kind.to_owned(),
                param: self.param(),
                code: code.map(str::to_owned),
            },
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            let worker = match &self {
                GatewayError::Upstream(e) => e.worker_url(),
                _ => None,
            };
            tracing::warn!(error = %self, worker = worker.unwrap_or("-"), status = status.as_u16(), "request failed");
        }
        let error = self.body();
        let body = serde_json::to_vec(&error).unwrap_or_default();
        let mut resp = (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
        let retry_after = match &self {
            GatewayError::Upstream(UpstreamError::Status {
                retry_after: Some(secs),
                ..
            })
            | GatewayError::TooManyRequests {
                retry_after_secs: secs,
                ..
            } => Some(*secs),
            _ => None,
        };
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        // For a route answering in another API's shape (`/v1/messages`) to re-render.
        resp.extensions_mut().insert(error);
        resp
    }
}
