//! `grpc://` workers: SGLang's gRPC service (`SglangScheduler`); `grpcs://` ones over TLS with
//! the `https://` workers' trust and identity. One HTTP/2 connection per worker carries every
//! call to it as its own stream (tonic's `Channel`, opened on first use and re-opened when it
//! breaks); the unary RPCs for health (`grpc.health.v1`), load, model info and abort; and the
//! reading of a gRPC status as the same [`UpstreamError`] an HTTP answer would be, so retries,
//! breakers and what the client sees do not depend on the wire.
//!
//! `generate`: the `Generate` stream read as text deltas (the gateway detokenizes).

pub mod generate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::{Origin, UpstreamError};
use crate::net::error_chain;
use crate::protocol::grpc::pb;
use crate::protocol::grpc::pb::sglang_scheduler_client::SglangSchedulerClient;

/// HTTP/2 PING interval on a connection with calls open. A long prefill sends no data for a
/// while; the pings keep NATs and load balancers from dropping the connection meanwhile, and
/// stay above the 10 s minimum SGLang's servicer allows (a faster pinger gets GOAWAY).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// An unanswered PING after this closes the connection: a dead worker, not a slow generation
/// (a worker busy generating still answers PINGs; they are the HTTP/2 layer's).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest message accepted from a worker (the servicer's own send limit).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// One channel (connection) per gRPC worker, made on first use.
#[derive(Clone, Debug)]
pub struct Channels {
    connect_timeout: Duration,
    /// For `grpcs://` workers: the trust and identity `https://` workers get (ALPN set to h2).
    tls: Arc<rustls::ClientConfig>,
    by_authority: Arc<Mutex<HashMap<String, Channel>>>,
}

pub type SchedulerClient = SglangSchedulerClient<Channel>;

impl Channels {
    pub fn new(connect_timeout: Duration, tls: rustls::ClientConfig) -> Channels {
        Channels {
            connect_timeout,
            tls: Arc::new(tls),
            by_authority: Arc::default(),
        }
    }

    /// The worker's client on its shared connection.
    pub fn client(&self, worker: &Origin) -> Result<SchedulerClient, UpstreamError> {
        Ok(SglangSchedulerClient::new(self.channel(worker)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// The worker's shared connection (every service on it: the scheduler's, health).
    fn channel(&self, worker: &Origin) -> Result<Channel, UpstreamError> {
        let mut map = self.by_authority.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = map.get(worker.authority()) {
            return Ok(c.clone());
        }
        let scheme = if worker.is_tls() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{}", worker.authority()))
            .map_err(|e| UpstreamError::Protocol {
                url: worker.url.clone(),
                reason: e.to_string(),
            })?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(false);
        let channel = if worker.is_tls() {
            endpoint.connect_with_connector_lazy(self.tls_connector())
        } else {
            endpoint.connect_lazy()
        };
        map.insert(worker.authority().to_owned(), channel.clone());
        Ok(channel)
    }

    /// TCP then TLS (HTTP/2 by ALPN), with the operator's CA and client certificate.
    fn tls_connector(&self) -> HttpsConnector<HttpConnector> {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(self.connect_timeout));
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*self.tls).clone())
            .https_only()
            .enable_http2()
            .wrap_connector(tcp)
    }

    /// Forgets a removed worker's connection (it closes once its last call ends).
    pub fn forget(&self, worker: &Origin) {
        let mut map = self.by_authority.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(worker.authority());
    }
}

/// Where a status arrived: before the worker answered the call, or in its answer's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Call,
    Stream,
}

/// A gRPC status as the [`UpstreamError`] the same failure over HTTP is. A status the worker
/// sent (its trailers) maps through the servicer's status table: UNAVAILABLE is a full queue
/// (503: never started, tried elsewhere), INVALID_ARGUMENT the client's input (400), INTERNAL a
/// failure (500: may have started, never retried). A status tonic made from a broken transport
/// (it carries the transport error as its source) is a connection that failed: refused (never
/// started), broken before any answer, or broken mid-stream (the generation can migrate).
pub fn status_error(worker: &Origin, status: tonic::Status, phase: Phase) -> UpstreamError {
    let url = worker.url.clone();
    let Some(source) = std::error::Error::source(&status) else {
        let code = StatusCode::from_u16(crate::protocol::grpc::http_status(status.code()))
            .unwrap_or(StatusCode::BAD_GATEWAY);
        return UpstreamError::Status {
            url,
            status: code,
            message: worker_message(&status),
            retry_after: None,
        };
    };
    let reason = error_chain(source);
    if is_connect_failure(source) {
        UpstreamError::Connect { url, reason }
    } else if phase == Phase::Call {
        UpstreamError::NoResponse { url, reason }
    } else {
        UpstreamError::Disconnected { url, reason }
    }
}

/// The worker's own words, as its HTTP error body would give them.
fn worker_message(status: &tonic::Status) -> String {
    if status.message().is_empty() {
        format!("the worker answered gRPC status {:?}", status.code())
    } else {
        status.message().to_owned()
    }
}

/// The connection was never made: nothing reached the worker.
fn is_connect_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::AddrNotAvailable
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
            ) {
                return true;
            }
        }
        // hyper-util's connector names its failures so (tonic wraps them without a type).
        if err.to_string().starts_with("tcp connect error") {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Healthy, or why not, under `timeout`: the servicer's readiness (`grpc.health.v1` `Check` for
/// the scheduler's service: SERVING once warmed up, NOT_SERVING while draining or stuck), the
/// answer SGLang's servicer gives probes without running anything; a servicer without the
/// standard service gets the `HealthCheck` RPC (a one-token probe through the engine).
pub async fn health(channels: &Channels, worker: &Origin, timeout: Duration) -> Result<(), String> {
    let channel = channels.channel(worker).map_err(|e| e.to_string())?;
    let mut client = HealthClient::new(channel);
    let call = client.check(tonic_health::pb::HealthCheckRequest {
        service: pb::sglang_scheduler_server::SERVICE_NAME.to_owned(),
    });
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err("grpc.health.v1 Check timed out".into()),
        Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32 => Ok(()),
        Ok(Ok(r)) => Err(format!(
            "grpc.health.v1: {}",
            ServingStatus::try_from(r.get_ref().status)
                .map_or("unknown status", |s| s.as_str_name())
        )),
        Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => {
            deep_health(channels, worker, timeout).await
        }
        Ok(Err(s)) => Err(status_error(worker, s, Phase::Call).to_string()),
    }
}

/// `HealthCheck` under `timeout`.
async fn deep_health(
    channels: &Channels,
    worker: &Origin,
    timeout: Duration,
) -> Result<(), String> {
    let mut client = channels.client(worker).map_err(|e| e.to_string())?;
    let call = client.health_check(pb::HealthCheckRequest {});
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err("HealthCheck timed out".into()),
        Ok(Err(s)) => Err(status_error(worker, s, Phase::Call).to_string()),
        Ok(Ok(r)) if r.get_ref().healthy => Ok(()),
        Ok(Ok(r)) => Err(format!("HealthCheck: unhealthy ({})", r.get_ref().message)),
    }
}

/// `GetLoads` under `timeout`.
pub async fn loads(
    channels: &Channels,
    worker: &Origin,
    timeout: Duration,
) -> Result<pb::GetLoadsResponse, UpstreamError> {
    let mut client = channels.client(worker)?;
    let call = client.get_loads(pb::GetLoadsRequest {
        dp_rank: None,
        include: vec!["core".into()],
    });
    unary(worker, timeout, call).await
}

/// `GetServerInfo` under `timeout`.
pub async fn server_info(
    channels: &Channels,
    worker: &Origin,
    timeout: Duration,
) -> Result<pb::GetServerInfoResponse, UpstreamError> {
    let mut client = channels.client(worker)?;
    unary(
        worker,
        timeout,
        client.get_server_info(pb::GetServerInfoRequest {}),
    )
    .await
}

/// `GetModelInfo` under `timeout`.
pub async fn model_info(
    channels: &Channels,
    worker: &Origin,
    timeout: Duration,
) -> Result<pb::GetModelInfoResponse, UpstreamError> {
    let mut client = channels.client(worker)?;
    unary(
        worker,
        timeout,
        client.get_model_info(pb::GetModelInfoRequest {}),
    )
    .await
}

/// `Abort` for `rid` (the servicer matches by prefix, as SGLang's scheduler does).
pub async fn abort(
    channels: &Channels,
    worker: &Origin,
    rid: &str,
    timeout: Duration,
) -> Result<(), UpstreamError> {
    let mut client = channels.client(worker)?;
    let call = client.abort(pb::AbortRequest {
        request_id: rid.to_owned(),
        reason: "the gateway's client left or the request ended".into(),
    });
    unary(worker, timeout, call).await.map(|_| ())
}

async fn unary<T>(
    worker: &Origin,
    timeout: Duration,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, UpstreamError> {
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(UpstreamError::Timeout {
            url: worker.url.clone(),
            stage: "response",
        }),
        Ok(Err(s)) => Err(status_error(worker, s, Phase::Call)),
        Ok(Ok(r)) => Ok(r.into_inner()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::Started;

    #[test]
    fn worker_statuses_classify_as_their_http_statuses() {
        let w = Origin::parse("grpc://10.0.0.1:30001").unwrap();
        let full = status_error(&w, tonic::Status::unavailable("queue full"), Phase::Call);
        assert_eq!(full.started(), Started::No);
        assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
        let bad = status_error(&w, tonic::Status::invalid_argument("too long"), Phase::Call);
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert!(!bad.may_retry());
        let failed = status_error(&w, tonic::Status::internal("boom"), Phase::Call);
        assert_eq!(failed.started(), Started::Maybe);
        assert_eq!(failed.status(), StatusCode::BAD_GATEWAY);
    }

    #[test]
    fn transport_failures_are_connection_errors() {
        let w = Origin::parse("grpc://10.0.0.1:30001").unwrap();
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let s = tonic::Status::from_error(Box::new(refused));
        assert!(matches!(
            status_error(&w, s, Phase::Call),
            UpstreamError::Connect { .. }
        ));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let mid = status_error(
            &w,
            tonic::Status::from_error(Box::new(reset)),
            Phase::Stream,
        );
        assert!(mid.is_disconnect());
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let early = status_error(&w, tonic::Status::from_error(Box::new(reset)), Phase::Call);
        assert_eq!(early.started(), Started::Unknown);
    }
}
