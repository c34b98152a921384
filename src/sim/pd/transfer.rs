//! The KV transfer between a decode and a prefill sim: the prefill sim's bootstrap server
//! (`--disaggregation-bootstrap-port`) tells its parallelism (`GET /sim/parallel_info`) and
//! answers `GET /sim/kv/{room}?dp_rank=R` once the room's KV exists on rank R (any rank without
//! one: the rank the prefill registered) and its transfer time has passed; the decode sim asks
//! it, under its waiting timeout. A decode that looks on another rank than the one holding the
//! KV never gets it, as SGLang's receiver then waits on a sender that has no such room.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use super::{KvFailure, KvInfo, ParallelInfo, Rooms};

/// What the bootstrap server needs.
pub struct Bootstrap {
    pub rooms: Arc<Rooms>,
    pub parallel: ParallelInfo,
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
        .route(
            "/sim/parallel_info",
            axum::routing::get(serve_parallel_info),
        )
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

async fn serve_parallel_info(State(b): State<Arc<Bootstrap>>) -> Response {
    axum::Json(b.parallel).into_response()
}

#[derive(serde::Deserialize)]
struct OnRank {
    dp_rank: Option<usize>,
}

async fn take_room(
    State(b): State<Arc<Bootstrap>>,
    Path(room): Path<u64>,
    Query(on): Query<OnRank>,
) -> Response {
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
    if on.dp_rank.is_some_and(|r| r != info.dp_rank) {
        // That rank's sender has no such room: the decode waits until its timeout.
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(b.transfer_time(info.prompt_tokens)).await;
    if !b.rooms.hand_over(room) {
        return (StatusCode::GONE, "the prefill request was aborted").into_response();
    }
    axum::Json(info).into_response()
}

/// Decode side: the prefill sim's parallelism, from its bootstrap server at `addr`.
pub async fn parallel_info(addr: &str, timeout: Duration) -> Result<ParallelInfo, KvFailure> {
    let handshake = || KvFailure::Handshake {
        addr: addr.to_owned(),
    };
    let body = tokio::time::timeout(timeout, get(&format!("http://{addr}/sim/parallel_info")))
        .await
        .map_err(|_| handshake())?
        .map_err(|_| handshake())?;
    serde_json::from_slice(&body).map_err(|_| handshake())
}

/// What a GET failed on.
enum GetError {
    Connect,
    Other,
}

async fn get(url: &str) -> Result<Bytes, GetError> {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let uri = url.parse::<hyper::Uri>().map_err(|_| GetError::Connect)?;
    let resp = client.get(uri).await.map_err(|e| {
        if e.is_connect() {
            GetError::Connect
        } else {
            GetError::Other
        }
    })?;
    if resp.status() != StatusCode::OK {
        return Err(GetError::Other);
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|_| GetError::Other)?;
    Ok(body.to_bytes())
}

/// Decode side: the room's KV on prefill rank `dp_rank` (`None`: the registered one) from the
/// prefill sim at `addr` (`host:port`), within `timeout`.
pub async fn fetch_kv(
    addr: &str,
    room: u64,
    dp_rank: Option<i64>,
    timeout: Duration,
) -> Result<KvInfo, KvFailure> {
    let lost = || KvFailure::Lost {
        addr: addr.to_owned(),
    };
    let on = dp_rank.map_or_else(String::new, |r| format!("?dp_rank={r}"));
    let fetch = async {
        let body = get(&format!("http://{addr}/sim/kv/{room}{on}"))
            .await
            .map_err(|e| match e {
                GetError::Connect => KvFailure::Handshake {
                    addr: addr.to_owned(),
                },
                GetError::Other => lost(),
            })?;
        serde_json::from_slice::<KvInfo>(&body).map_err(|_| lost())
    };
    match tokio::time::timeout(timeout, fetch).await {
        Ok(result) => result,
        Err(_) => Err(KvFailure::Timeout {
            secs: timeout.as_secs_f64(),
        }),
    }
}
