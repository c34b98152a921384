//! Telling a worker to stop a generation nobody will read.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Client, Origin};

/// Armed while a worker may still be generating for us; dropping it armed sends
/// `/abort_request` for the rid (the client went away, or we gave up on the stream).
pub struct AbortOnDrop {
    armed: Option<(Client, Arc<Origin>, String)>,
}

impl AbortOnDrop {
    pub fn new(client: Client, worker: Arc<Origin>, rid: String) -> AbortOnDrop {
        AbortOnDrop {
            armed: Some((client, worker, rid)),
        }
    }

    /// The generation ended on its own: nothing to abort.
    pub fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some((client, worker, rid)) = self.armed.take() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { send(&client, &worker, &rid).await });
            }
        }
    }
}

pub async fn send(client: &Client, worker: &Origin, rid: &str) {
    let body = serde_json::json!({ "rid": rid, "abort_all": false }).to_string();
    let fut = client.post_json(worker, "/abort_request", Bytes::from(body));
    match tokio::time::timeout(Duration::from_secs(5), fut).await {
        Ok(Ok(_)) => tracing::debug!(rid, worker = %worker.url, "aborted on worker"),
        Ok(Err(e)) => tracing::warn!(rid, worker = %worker.url, error = %e, "abort_request failed"),
        Err(_) => tracing::warn!(rid, worker = %worker.url, "abort_request timed out"),
    }
}
