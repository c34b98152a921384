//! The OTLP exporter and the `tracing` layer that feeds it. Spans are batched and sent by the
//! SDK's batch processor on a thread of its own, never on the request path.

use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_subscriber::Layer;
use tracing_subscriber::Registry;

use super::{Protocol, TraceConfig, ENABLED, TARGET};
use crate::net::tls::ClientTls;

/// OTel's default export timeout.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("--otlp-traces-sample-ratio must be between 0 and 1, got {0}")]
    Ratio(f64),
    #[error("OTLP trace exporter: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("OTLP trace exporter TLS: {0}")]
    Tls(#[from] crate::net::tls::TlsError),
}

/// The running exporter; [`Exporter::shutdown`] sends what is still batched.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Starts exporting when an endpoint is configured (flag or `OTEL_EXPORTER_OTLP_*`), and
    /// returns the layer to add to the subscriber. Must run inside the tokio runtime (the
    /// exporters' connections live on it).
    pub fn start(
        config: &TraceConfig,
    ) -> Result<Option<(Exporter, impl Layer<Registry> + Send + Sync)>, TraceError> {
        let from_env = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.is_empty()));
        if config.otlp_traces_endpoint.is_none() && !from_env {
            return Ok(None);
        }
        let ratio = config.otlp_traces_sample_ratio;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(TraceError::Ratio(ratio));
        }
        let exporter = match protocol(config.otlp_protocol) {
            Protocol::Grpc => {
                let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                if let Some(url) = &config.otlp_traces_endpoint {
                    b = b.with_endpoint(url.clone());
                }
                b.build()?
            }
            Protocol::HttpProtobuf => {
                let mut b = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_http_client(OnRuntime::new()?);
                if let Some(url) = &config.otlp_traces_endpoint {
                    b = b.with_endpoint(http_traces_url(url));
                }
                b.build()?
            }
        };
        let mut resource = Resource::builder();
        if std::env::var("OTEL_SERVICE_NAME").is_err() {
            resource = resource.with_service_name("switchboard");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .with_resource(resource.build())
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("switchboard"))
            .with_location(false)
            .with_target(false)
            .with_threads(false)
            .with_level(false)
            .with_tracked_inactivity(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.target() == TARGET
            }));
        ENABLED.store(true, Ordering::Relaxed);
        Ok(Some((Exporter { provider }, layer)))
    }

    /// Sends the spans still batched (at shutdown).
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "trace exporter shutdown");
        }
    }
}

/// The flag, then OTel's variables, then OTel's default.
fn protocol(flag: Option<Protocol>) -> Protocol {
    if let Some(p) = flag {
        return p;
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        match std::env::var(var).as_deref() {
            Ok("grpc") => return Protocol::Grpc,
            Ok("http/protobuf") => return Protocol::HttpProtobuf,
            _ => {}
        }
    }
    Protocol::HttpProtobuf
}

/// A traces URL for http/protobuf: a bare collector address gets OTel's `/v1/traces` path.
fn http_traces_url(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    if has_path {
        url.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// Hyper's client driven on the gateway's runtime: the batch processor calls the exporter from
/// its own thread, where no tokio reactor is current, so each send is spawned onto the runtime.
#[derive(Debug)]
struct OnRuntime {
    client: HyperClient<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    >,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    fn new() -> Result<OnRuntime, TraceError> {
        let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
        tcp.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(ClientTls::default().config()?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        Ok(OnRuntime {
            client: HyperClient::new(https, EXPORT_TIMEOUT, None),
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_collector_address_gets_the_traces_path() {
        assert_eq!(
            http_traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            http_traces_url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            http_traces_url("https://c:6006/v1/traces"),
            "https://c:6006/v1/traces"
        );
    }

    #[test]
    fn the_flag_wins_over_the_environment() {
        assert_eq!(protocol(Some(Protocol::Grpc)), Protocol::Grpc);
    }
}
