//! `--api-key` on inference routes and `--admin-api-key` on admin routes: Bearer tokens
//! compared in constant time (the inference key also as Anthropic's `x-api-key` header).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::AppState;
use crate::error::GatewayError;

/// An empty key matches nothing (config refuses one; this keeps a hand-built config safe too).
fn bearer_matches(req: &Request, key: &str) -> bool {
    if key.is_empty() {
        return false;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    bool::from(given.as_bytes().ct_eq(key.as_bytes()))
}

/// Anthropic's clients send the key as `x-api-key`.
fn x_api_key_matches(req: &Request, key: &str) -> bool {
    match req.headers().get("x-api-key") {
        Some(given) if !key.is_empty() => bool::from(given.as_bytes().ct_eq(key.as_bytes())),
        _ => false,
    }
}

pub async fn require_api_key(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    match state.config.api_key.as_deref() {
        Some(key) if !bearer_matches(&req, key) && !x_api_key_matches(&req, key) => {
            GatewayError::Unauthorized.into_response()
        }
        _ => next.run(req).await,
    }
}

/// Admin routes need the admin key (the inference key is not enough). Without an admin key
/// they are open only on a loopback listener, where only this machine can reach them.
pub async fn require_admin_key(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    match state.config.admin_api_key.as_deref() {
        Some(key) if bearer_matches(&req, key) => next.run(req).await,
        Some(_) if req.headers().contains_key(header::AUTHORIZATION) => {
            GatewayError::Forbidden.into_response()
        }
        Some(_) => GatewayError::Unauthorized.into_response(),
        None if is_loopback(&state.config.host) => next.run(req).await,
        None => GatewayError::Forbidden.into_response(),
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
