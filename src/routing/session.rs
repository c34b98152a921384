//! The key that ties a request to a session, for session-affine policies.

use axum::http::HeaderMap;

/// SMG's `X-SMG-Routing-Key`, then `X-Session-ID`, then the body's `user` (or `routing_key` on
/// `/generate`).
pub fn session_key<'a>(headers: &'a HeaderMap, user: Option<&'a str>) -> Option<&'a str> {
    ["x-smg-routing-key", "x-session-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .or(user)
        .filter(|k| !k.is_empty())
}
