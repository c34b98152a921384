//! One HTTP client for all workers: keep-alive HTTP/1 connections kept per worker
//! (`pool`: idle ones closed before SGLang's own 5 s keep-alive would), TCP_NODELAY, bounded
//! connect time; `https://` workers through rustls with the trust and identity the operator
//! configured.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, Request, Response, StatusCode, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower::ServiceExt;

use super::pool::{Body, Sender};
use super::{Origin, UpstreamError};
use crate::net::error_chain;

#[derive(Clone, Debug)]
pub struct Client {
    /// Opens connections (TCP, then TLS for `https://`); the pools keep them.
    connector: HttpsConnector<HttpConnector>,
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
        Client { connector, grpc }
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
    ) -> Result<Response<Body>, UpstreamError> {
        let mut req = Request::post(Uri::from_static(path))
            .header(header::HOST, worker.host_header().clone())
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
        let resp = self.send(worker, req).await?;
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
        let req = Request::get(Uri::from_static(path))
            .header(header::HOST, worker.host_header().clone())
            .body(Full::new(Bytes::new()))
            .map_err(|e| protocol(worker, e))?;
        let fut = async {
            let resp = self.send(worker, req).await?;
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

    /// Sends on an idle connection of the worker's, or a new one, and returns once the
    /// response's head arrived. Only a request hyper hands back unsent is sent again: on a
    /// pooled connection that closed meanwhile it goes out on the next one (at worst a new
    /// connection, after which the loop ends).
    async fn send(
        &self,
        worker: &Origin,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<Body>, UpstreamError> {
        loop {
            let (mut sender, reused) = match worker.pool().take() {
                Some(sender) => (sender, true),
                None => (self.connect(worker).await?, false),
            };
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    let pool = Arc::clone(worker.pool());
                    return Ok(resp.map(|body| Body::new(body, sender, pool)));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => req = unsent,
                    // Handed back unsent: the worker never saw it.
                    Some(_) => return Err(connect_error(worker, &e.into_error())),
                    // A connection that broke after the request went out but before any
                    // response (typically a keep-alive connection the worker had just closed)
                    // may or may not have started a generation.
                    None => {
                        return Err(UpstreamError::NoResponse {
                            url: worker.url.clone(),
                            reason: error_chain(&e.into_error()),
                        })
                    }
                },
            }
        }
    }

    /// A new connection to the worker (TCP, TLS for `https://`, HTTP/1 handshake), its
    /// connection task running on the runtime.
    async fn connect(&self, worker: &Origin) -> Result<Sender, UpstreamError> {
        let base = worker.uri("/").map_err(|e| protocol(worker, e))?;
        let io = self
            .connector
            .clone()
            .oneshot(base)
            .await
            .map_err(|e| connect_error(worker, &*e))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| connect_error(worker, &e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "worker connection closed");
            }
        });
        Ok(sender)
    }
}

/// Only a failure to connect (or a request handed back unsent) proves the worker never saw it.
fn connect_error(worker: &Origin, e: &(dyn std::error::Error + 'static)) -> UpstreamError {
    UpstreamError::Connect {
        url: worker.url.clone(),
        reason: error_chain(e),
    }
}

fn protocol(worker: &Origin, e: impl std::fmt::Display) -> UpstreamError {
    UpstreamError::Protocol {
        url: worker.url.clone(),
        reason: e.to_string(),
    }
}

async fn status_error(worker: &Origin, resp: Response<Body>) -> UpstreamError {
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
