//! `switchboard sim --grpc-mode`: the same engine served over SGLang's gRPC service
//! (`sglang.grpc.scheduler.SglangScheduler`, as `smg-grpc-servicer` serves it for SGLang's
//! `--grpc-mode`) on `--port`, and the simulator's HTTP routes on a side port (`--metrics-port`)
//! for `/metrics`, `/sim/faults` and `/sim/requests`, as SGLang's servicer keeps an HTTP port
//! for its metrics.
//!
//! - `generate`: the `Generate` stream (chunks, then `Complete`; refusals as gRPC statuses).
//! - `service`: every other RPC (health, abort, model and server info, loads, admin).
//! - `health`: `grpc.health.v1.Health`, the servicer's readiness answer.
//! - `kv_events`: `SubscribeKvEvents`, the `--kv-events-config` publisher's batches relayed.
//! - this file: the listeners, and the body wrapper that turns the `die_after_tokens` fault
//!   into a reset stream.

mod generate;
mod health;
mod kv_events;
mod service;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use hyper::body::Frame;

use super::state::SimState;
use super::{SimError, SimHandle};
use crate::protocol::grpc::pb::sglang_scheduler_server::SglangSchedulerServer;

/// Trailer metadata the `Generate` stream ends with when the die fault fires: the body
/// wrapper turns that end into an error, which makes hyper reset the HTTP/2 stream
/// (RST_STREAM), as a worker that died mid-stream looks to the client.
const RESET_MARKER: &str = "x-sim-reset";

/// Serves the gRPC service on `listener` (bound at `addr`) and the HTTP routes on
/// `host:metrics_port`.
pub async fn start(
    state: Arc<SimState>,
    listener: crate::net::Listener,
    addr: SocketAddr,
    host: &str,
    metrics_port: u16,
) -> Result<SimHandle, SimError> {
    let (side_tcp, side_addr) = crate::net::bind(host, metrics_port).await?;
    let side_app = super::server::router(Arc::clone(&state));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(side_tcp, side_app).await {
            tracing::error!(error = %e, "simulator HTTP side port stopped");
        }
    });
    let health = tonic_health::pb::health_server::HealthServer::new(health::HealthService {
        state: Arc::clone(&state),
    });
    let service = SglangSchedulerServer::new(service::Scheduler::new(state))
        .max_decoding_message_size(256 * 1024 * 1024)
        .max_encoding_message_size(256 * 1024 * 1024);
    let app = tonic::service::Routes::new(service)
        .add_service(health)
        .into_axum_router()
        .layer(axum::middleware::map_response(reset_marked_streams));
    // axum's server speaks HTTP/2 without TLS (prior knowledge), as gRPC clients connect.
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "simulator gRPC server stopped");
        }
    });
    Ok(SimHandle {
        addr,
        task,
        metrics_addr: Some(side_addr),
    })
}

async fn reset_marked_streams(resp: Response) -> Response {
    resp.map(|body| Body::new(ResetOnMarker { inner: body }))
}

/// Passes a response body through, except that trailers carrying [`RESET_MARKER`] become an
/// error (hyper then resets the stream instead of ending it with a status).
struct ResetOnMarker {
    inner: Body,
}

#[derive(Debug, thiserror::Error)]
#[error("injected fault: stream reset")]
struct InjectedReset;

impl hyper::body::Body for ResetOnMarker {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame)))
                if frame
                    .trailers_ref()
                    .is_some_and(|t| t.contains_key(RESET_MARKER)) =>
            {
                Poll::Ready(Some(Err(axum::Error::new(InjectedReset))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
