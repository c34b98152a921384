//! A request's ids. The worker only ever sees ours: SGLang aborts every request whose rid
//! *starts with* the one given, so a client-chosen rid (`"a"`, `""`, another client's reused
//! id) could end other clients' generations. The client's own `x-request-id` is kept for the
//! logs and echoed back in the response header.

use axum::http::HeaderMap;

const MAX_LEN: usize = 128;

pub struct RequestId {
    /// Ours, sent to the worker as `rid`: 32 hex digits, random, so no rid is another's prefix.
    pub rid: String,
    /// The client's `x-request-id`, when it is safe to log and echo.
    pub client: Option<String>,
    /// The trace the client's `traceparent` continues (only while traces are exported).
    parent: Option<opentelemetry::Context>,
}

impl RequestId {
    pub fn new(headers: &HeaderMap) -> RequestId {
        // The thread-local generator: `new_v4` asks the kernel for every id (a syscall per request).
        let rid = uuid::Builder::from_random_bytes(rand::random())
            .into_uuid()
            .simple()
            .to_string();
        let client = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| {
                !v.is_empty()
                    && v.len() <= MAX_LEN
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
            })
            .map(str::to_owned);
        RequestId {
            rid,
            client,
            parent: crate::traces::parent_from(headers),
        }
    }

    /// What the `x-request-id` response header carries: the client's own id, else ours.
    pub fn echo(&self) -> &str {
        self.client.as_deref().unwrap_or(&self.rid)
    }

    /// The request's log span: every line logged inside it names both ids. With traces on it is
    /// also the request's exported span (GenAI naming: `{operation} {model}`), continuing the
    /// client's trace.
    pub fn span(&self, operation: &'static str, model: &str) -> tracing::Span {
        use crate::traces::TARGET;
        if !crate::traces::enabled() {
            return tracing::info_span!(target: TARGET, "request", rid = %self.rid, client_id = self.client.as_deref());
        }
        let span = tracing::info_span!(
            target: TARGET,
            "request",
            rid = %self.rid,
            client_id = self.client.as_deref(),
            otel.name = %format_args!("{operation} {model}"),
            otel.kind = "server",
            gen_ai.operation.name = operation,
            gen_ai.request.model = model,
            gen_ai.response.id = %self.rid,
        );
        crate::traces::set_parent(&span, self.parent.clone());
        span
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_rid_is_always_ours_and_the_echo_the_clients_when_sane() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", "abc-123".parse().unwrap());
        let id = RequestId::new(&h);
        assert_eq!(id.echo(), "abc-123");
        assert_eq!(id.rid.len(), 32);
        assert!(id.rid.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(RequestId::new(&h).rid, id.rid, "unique per request");
        h.insert("x-request-id", "bad id\twith spaces".parse().unwrap());
        let id = RequestId::new(&h);
        assert_eq!((id.client.as_deref(), id.echo()), (None, id.rid.as_str()));
        let id = RequestId::new(&HeaderMap::new());
        assert_eq!(id.echo(), id.rid);
    }
}
