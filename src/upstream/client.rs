//! One pooled HTTP client for all workers: keep-alive connections (idle ones closed before
//! SGLang's own 5 s keep-alive would), TCP_NODELAY, bounded connect time; `https://` workers
//! through rustls with the trust and identity the operator configured.

use std::time::Duration;

use axum::http::{header, HeaderValue, Method, Request, Response, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::{Origin, UpstreamError};
use crate::net::error_chain;

const POOL_IDLE: Duration = Duration::from_secs(4);

#[derive(Clone, Debug)]
pub struct Client {
    http: hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// Connections to `grpc://` and `grpcs://` workers.
    grpc: super::grpc::Channels,
}

impl Client {
    /// `tls` is used for `https://` and `grpcs://` workers only; plain ones connect as before.
    pub fn new(connect_timeout: Duration, tls: rustls::ClientConfig) -> Client {
        let mut connector = HttpConnector::new();
        // The TLS layer above hands https URIs down to this TCP connector.
        connector.enforce_http(false);
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_keepalive(Some(Duration::from_secs(30)));
        // HTTP/1.1 over TLS too (ALPN), as over plain TCP: what SGLang serves.
        let grpc = super::grpc::Channels::new(connect_timeout, tls.clone());
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(1024)
            .build(connector);
        Client { http, grpc }
    }

    /// The connections to `grpc://` workers.
    pub fn grpc(&self) -> &super::grpc::Channels {
        &self.grpc
    }

    /// POSTs JSON and returns the response once its headers arrived. Non-2xx answers become
    /// `UpstreamError::Status` with the worker's message.
    pub async fn post_json(
        &self,
        worker: &Origin,
        path: &'static str,
        body: Bytes,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let uri = worker.uri(path).map_err(|e| protocol(worker, e))?;
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .header(
                header::ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            )
            .body(Full::new(body))
            .map_err(|e| protocol(worker, e))?;
        crate::traces::inject(req.headers_mut());
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| request_error(worker, &e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(status_error(worker, resp).await)
    }

    /// GET with a deadline, returning the body (for health, loads and info routes).
    pub async fn get(
        &self,
        worker: &Origin,
        path: &'static str,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), UpstreamError> {
        let uri = worker.uri(path).map_err(|e| protocol(worker, e))?;
        let req = Request::get(uri)
            .body(Full::new(Bytes::new()))
            .map_err(|e| protocol(worker, e))?;
        let fut = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| UpstreamError::Connect {
                    url: worker.url.clone(),
                    reason: error_chain(&e),
                })?;
            let status = resp.status();
            let body =
                resp.into_body()
                    .collect()
                    .await
                    .map_err(|e| UpstreamError::Disconnected {
                        url: worker.url.clone(),
                        reason: e.to_string(),
                    })?;
            Ok((status, body.to_bytes()))
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| UpstreamError::Timeout {
                url: worker.url.clone(),
                stage: "response",
            })?
    }
}

/// Only a failure to connect proves the worker never saw the request. A connection that broke
/// after the request went out but before any response (typically a pooled keep-alive
/// connection the worker had just closed) may or may not have started a generation.
fn request_error(worker: &Origin, e: &hyper_util::client::legacy::Error) -> UpstreamError {
    let url = worker.url.clone();
    let reason = error_chain(e);
    if e.is_connect() {
        UpstreamError::Connect { url, reason }
    } else {
        UpstreamError::NoResponse { url, reason }
    }
}

fn protocol(worker: &Origin, e: impl std::fmt::Display) -> UpstreamError {
    UpstreamError::Protocol {
        url: worker.url.clone(),
        reason: e.to_string(),
    }
}

async fn status_error(worker: &Origin, resp: Response<Incoming>) -> UpstreamError {
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    // Error bodies are small; cap what we read so a misbehaving worker cannot flood us.
    let body = http_body_util::Limited::new(resp.into_body(), 64 * 1024)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let message = crate::protocol::sglang::error_message(&body).unwrap_or_else(|| {
        format!(
            "the worker answered {}: {}",
            status,
            String::from_utf8_lossy(&body).trim()
        )
    });
    UpstreamError::Status {
        url: worker.url.clone(),
        status,
        message,
        retry_after,
    }
}
