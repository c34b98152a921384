//! Telling a worker to stop a generation nobody will read.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Client, Origin};

/// How a worker's request is stopped when nobody will read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abort {
    /// The worker cannot abort by rid (OpenAI-compatible servers stop when the connection closes).
    OnDisconnect,
    /// `/abort_request` for the rid.
    Rid,
    /// A batch of this many prompts: SGLang knows them as `<rid>_0` … and forwards an abort
    /// only for an exact live rid, so each is aborted by its own.
    Batch(usize),
}

impl Abort {
    /// The rids to send `/abort_request` for.
    pub fn rids(self, rid: &str) -> Vec<String> {
        match self {
            Abort::OnDisconnect => Vec::new(),
            Abort::Rid => vec![rid.to_owned()],
            Abort::Batch(n) => (0..n).map(|i| format!("{rid}_{i}")).collect(),
        }
    }
}

/// Armed while a worker may still be generating for us; dropping it armed sends
/// `/abort_request` (a gRPC worker: the `Abort` RPC) for each rid (the client went away, or we
/// gave up on the stream).
pub struct AbortOnDrop {
    armed: Option<(Client, Arc<Origin>, Vec<String>)>,
}

impl AbortOnDrop {
    pub fn new(client: Client, worker: Arc<Origin>, rids: Vec<String>) -> AbortOnDrop {
        AbortOnDrop {
            armed: Some((client, worker, rids)),
        }
    }

    /// The generation ended on its own: nothing to abort.
    pub fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some((client, worker, rids)) = self.armed.take() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    for rid in &rids {
                        send(&client, &worker, rid).await;
                    }
                });
            }
        }
    }
}

pub async fn send(client: &Client, worker: &Origin, rid: &str) {
    if worker.is_grpc() {
        let sent = super::grpc::abort(client.grpc(), worker, rid, Duration::from_secs(5)).await;
        match sent {
            Ok(()) => tracing::debug!(rid, worker = %worker.url, "aborted on worker"),
            Err(e) => tracing::warn!(rid, worker = %worker.url, error = %e, "Abort RPC failed"),
        }
        return;
    }
    let body = serde_json::json!({ "rid": rid, "abort_all": false }).to_string();
    let fut = client.post_json(worker, "/abort_request", Bytes::from(body));
    match tokio::time::timeout(Duration::from_secs(5), fut).await {
        Ok(Ok(_)) => tracing::debug!(rid, worker = %worker.url, "aborted on worker"),
        Ok(Err(e)) => tracing::warn!(rid, worker = %worker.url, error = %e, "abort_request failed"),
        Err(_) => tracing::warn!(rid, worker = %worker.url, "abort_request timed out"),
    }
}
