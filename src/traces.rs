//! OpenTelemetry traces: one span per inference request (the request's log span, exported) with
//! a child span per stage, GenAI semantic-convention attributes, and W3C `traceparent` read from
//! the client and passed on to the worker.
//!
//! Spans are ordinary `tracing` spans; `tracing-opentelemetry` turns those under [`TARGET`] into
//! OTel spans when `--otlp-traces-endpoint` (or `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`) is set.
//! Off, nothing is exported and every helper here returns after one relaxed atomic load: the stage
//! spans are at DEBUG, which the log filter leaves disabled, so their call sites cost nothing.

mod export;

use std::sync::atomic::{AtomicBool, Ordering};

use hyper::http;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::Context;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use export::{Exporter, TraceError};

/// The `tracing` target of the spans that become OTel spans (the request and its stages).
pub const TARGET: &str = "switchboard::trace";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// `switchboard serve`'s trace settings.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceConfig {
    /// OTLP endpoint that receives traces (e.g. http://collector:4317 for grpc,
    /// http://collector:4318/v1/traces for http/protobuf; a URL without a path gets /v1/traces
    /// there). Omitted: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`;
    /// none of them: no traces.
    #[arg(long)]
    pub otlp_traces_endpoint: Option<String>,
    /// OTLP transport. Omitted: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, then
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, then http/protobuf (OTel's default).
    #[arg(long, value_enum)]
    pub otlp_protocol: Option<Protocol>,
    /// Share of new traces recorded (0 to 1); a request that arrives with a `traceparent`
    /// follows its caller's sampling decision.
    #[arg(long, default_value_t = 1.0)]
    pub otlp_traces_sample_ratio: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Grpc,
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

/// Whether spans are exported (set once, when the exporter starts).
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The span a client's `traceparent` names, to continue its trace (`None` without one, or off).
pub fn parent_from(headers: &http::HeaderMap) -> Option<Context> {
    if !enabled() {
        return None;
    }
    use opentelemetry::trace::TraceContextExt;
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes `span` continue the client's trace.
pub fn set_parent(span: &tracing::Span, parent: Option<Context>) {
    if let Some(cx) = parent {
        // Fails only for a span that is already closed or not exported: nothing to continue.
        let _ = span.set_parent(cx);
    }
}

/// Adds the current span's `traceparent` to a request for a worker (SGLang continues it).
pub fn inject(headers: &mut http::HeaderMap) {
    if enabled() {
        let cx = tracing::Span::current().context();
        TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    }
}

/// Sets an attribute on an exported span (the GenAI names: `gen_ai.usage.input_tokens`, …).
pub fn attribute(span: &tracing::Span, key: &'static str, value: impl Into<opentelemetry::Value>) {
    if enabled() {
        span.set_attribute(key, value);
    }
}

/// A child span of the current one for a gateway stage, named like the stage histogram's label.
/// Disabled (free) when traces are off.
pub fn stage(name: &'static str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    tracing::debug_span!(target: TARGET, "stage", otel.name = name)
}

/// A stage span under `parent` (for work on another thread, where no span is current).
pub fn stage_in(parent: &tracing::Span, name: &'static str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    tracing::debug_span!(target: TARGET, parent: parent, "stage", otel.name = name)
}

/// The span of one attempt on a worker (a client span: the worker continues the trace from it).
pub fn upstream(worker_url: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    tracing::debug_span!(target: TARGET, "upstream", otel.name = "upstream_first_token", otel.kind = "client", server.address = worker_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_means_no_spans_and_no_headers() {
        assert!(!enabled());
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        assert!(parent_from(&headers).is_none());
        let mut out = http::HeaderMap::new();
        inject(&mut out);
        assert!(out.is_empty());
        assert!(stage("route").is_none());
    }
}
