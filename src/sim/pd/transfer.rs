//! The KV transfer between a decode and a prefill sim: the prefill sim's bootstrap server
//! (`--disaggregation-bootstrap-port`) answers `GET /sim/kv/{room}` once the room's KV exists
//! and its transfer time has passed; the decode sim asks it, under its waiting timeout.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use super::{KvFailure, KvInfo, Rooms};

/// What the bootstrap server needs.
pub struct Bootstrap {
    pub rooms: Arc<Rooms>,
    pub base_us: f64,
    pub per_token_us: f64,
    pub time_scale: f64,
}

impl Bootstrap {
    fn transfer_time(&self, tokens: usize) -> Duration {
        let us = (self.base_us + self.per_token_us * tokens as f64) * self.time_scale;
        Duration::from_secs_f64(us.max(0.0) / 1e6)
    }
}

/// Serves the bootstrap port until the process ends.
pub fn serve_bootstrap(listener: crate::net::Listener, bootstrap: Bootstrap) {
    let app = axum::Router::new()
        .route("/sim/kv/{room}", axum::routing::get(take_room))
        .with_state(Arc::new(bootstrap));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "bootstrap server stopped");
        }
    });
}

/// Forgets a room nobody prefilled when its decode stops waiting.
struct Waiting<'a> {
    rooms: &'a Rooms,
    room: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.rooms.abandon(self.room);
    }
}

async fn take_room(State(b): State<Arc<Bootstrap>>, Path(room): Path<u64>) -> Response {
    let _waiting = Waiting {
        rooms: &b.rooms,
        room,
    };
    let mut ready = b.rooms.watch(room);
    let info = match ready.wait_for(|v| v.is_some()).await {
        Ok(v) => *v,
        Err(_) => None,
    };
    let Some(info) = info else {
        return StatusCode::GONE.into_response();
    };
    tokio::time::sleep(b.transfer_time(info.prompt_tokens)).await;
    if !b.rooms.hand_over(room) {
        return (StatusCode::GONE, "the prefill request was aborted").into_response();
    }
    axum::Json(info).into_response()
}

/// Decode side: the room's KV from the prefill sim at `addr` (`host:port`), within `timeout`.
pub async fn fetch_kv(addr: &str, room: u64, timeout: Duration) -> Result<KvInfo, KvFailure> {
    let lost = || KvFailure::Lost {
        addr: addr.to_owned(),
    };
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let uri = format!("http://{addr}/sim/kv/{room}")
        .parse::<hyper::Uri>()
        .map_err(|_| KvFailure::Handshake {
            addr: addr.to_owned(),
        })?;
    let fetch = async {
        let resp = client.get(uri).await.map_err(|e| {
            if e.is_connect() {
                KvFailure::Handshake {
                    addr: addr.to_owned(),
                }
            } else {
                lost()
            }
        })?;
        if resp.status() != StatusCode::OK {
            return Err(lost());
        }
        let body = resp.into_body().collect().await.map_err(|_| lost())?;
        serde_json::from_slice::<KvInfo>(&body.to_bytes()).map_err(|_| lost())
    };
    match tokio::time::timeout(timeout, fetch).await {
        Ok(result) => result,
        Err(_) => Err(KvFailure::Timeout {
            secs: timeout.as_secs_f64(),
        }),
    }
}
