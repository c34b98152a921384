//! One inference request after parsing: the token-id path or the forwarding path of the relay.
//! Errors before the response starts are counted and rendered here; after that the relay owns
//! them.

use crate::upstream::abort::Abort;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::config::BackendKind;
use crate::error::GatewayError;
use crate::metrics::{Endpoint, Stage};
use crate::models::Served;
use crate::prepare::Prepared;
use crate::relay::choices::{self, Choices};
use crate::relay::format::{Formatter, Kind};
use crate::relay::generation::Spec;
use crate::relay::grammar::Grammar;
use crate::relay::passthrough::{self, Forward};
use crate::relay::{collect, stream, Generation};
use crate::routing::session_key;
use crate::server::request_id::RequestId;
use crate::server::AppState;

pub struct Request<'a> {
    pub headers: &'a HeaderMap,
    pub id: &'a RequestId,
    pub body: Bytes,
    pub served: Arc<Served>,
    pub prepared: Box<Prepared>,
    pub kind: Kind,
    pub start: Instant,
}

/// Runs a handler body in the request's log span; an error it returns is counted under
/// `endpoint` and rendered. Every answer, errors too, carries the `x-request-id` to echo.
///
/// The body comes boxed: it holds the whole request's state machine (~14 KiB for a chat
/// request), and unboxed it made the handler's future twice that, which axum and tower then
/// moved several times per request (`memmove` was a tenth of the gateway's CPU).
pub async fn respond<F>(
    app: &AppState,
    endpoint: Endpoint,
    id: &RequestId,
    fut: Pin<Box<F>>,
) -> Response
where
    F: Future<Output = Result<Response, GatewayError>>,
{
    // With several models the request's is known only once its body is read (`parse_and_prepare`).
    let model = match app.models.len() {
        1 => &*app.models.default_model().model.name,
        _ => "",
    };
    let span = id.span(endpoint.operation(), model);
    let traced = crate::traces::enabled().then(|| span.clone());
    let resp = match fut.instrument(span).await {
        Ok(resp) => resp,
        Err(e) => {
            let status = e.status().as_u16();
            app.metrics.request_done(endpoint, status);
            if let Some(span) = traced {
                crate::traces::attribute(&span, "http.response.status_code", i64::from(status));
                crate::traces::attribute(&span, "error.type", status.to_string());
            }
            e.into_response()
        }
    };
    with_request_id(resp, id.echo())
}

/// A request body that names the model it is for.
pub trait NamesModel {
    fn model(&self) -> &str;
}

macro_rules! names_model {
    ($($t:ty),*) => {$(
        impl NamesModel for $t {
            fn model(&self) -> &str {
                &self.model
            }
        }
    )*};
}
names_model!(
    crate::protocol::openai::ChatCompletionRequest,
    crate::protocol::openai::CompletionRequest,
    crate::protocol::anthropic::MessagesRequest,
    crate::protocol::openai::responses::ResponsesRequest
);

/// A request read, its model looked up, and prepared for that model.
pub struct Parsed<R> {
    pub req: R,
    pub served: Arc<Served>,
    /// Boxed: ~700 bytes that every layer of the request's future would hold twice (an
    /// `async fn` keeps its arguments and their moved copies).
    pub prepared: Box<Prepared>,
}

/// Parses the body, looks up the model it names (404 `model_not_found` for none) and prepares
/// it for that model (template + tokenize once), off the I/O threads when it is large; the
/// stages are timed and traced.
pub async fn parse_and_prepare<R: NamesModel + Send + 'static>(
    app: &Arc<AppState>,
    body: Bytes,
    start: Instant,
    parse: fn(&[u8]) -> Result<R, GatewayError>,
    prepare: fn(&crate::model::Model, &R) -> Result<Prepared, GatewayError>,
) -> Result<Parsed<R>, GatewayError> {
    let app = Arc::clone(app);
    // The work may run on the blocking pool, where the request's span is not current.
    let span = tracing::Span::current();
    crate::server::body::off_io_threads_if_large(body.len(), move || {
        let req = crate::traces::stage_in(&span, "parse").in_scope(|| parse(&body))?;
        let served = Arc::clone(app.models.find(req.model())?);
        let metrics = served.metrics();
        metrics.stage(Stage::Parse, start.elapsed().as_secs_f64());
        if app.models.len() > 1 && crate::traces::enabled() {
            crate::traces::attribute(&span, "gen_ai.request.model", req.model().to_owned());
        }
        let t = Instant::now();
        let prepared = crate::traces::stage_in(&span, "template_tokenize")
            .in_scope(|| prepare(&served.model, &req))?;
        metrics.stage(Stage::Tokenize, t.elapsed().as_secs_f64());
        Ok(Parsed {
            req,
            served,
            prepared: Box::new(prepared),
        })
    })
    .await
}

/// Chat and completions: native `/generate` with our token ids, or the worker's own route.
pub async fn openai(app: &Arc<AppState>, req: Request<'_>) -> Result<Response, GatewayError> {
    let rid = &req.id.rid;
    let endpoint = if req.kind == Kind::Chat {
        Endpoint::Chat
    } else {
        Endpoint::Completions
    };
    let p = req.prepared;
    if app.config.backend == BackendKind::Openai {
        let path = if req.kind == Kind::Chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        // SGLang workers can abort by rid; OpenAI-compatible ones stop when the connection closes.
        let abortable = app.config.backend == BackendKind::Sglang;
        let (body, abort) = if abortable {
            (with_rid(&req.body, rid), Abort::Rid)
        } else {
            (req.body, Abort::OnDisconnect)
        };
        let forward = Forward {
            path,
            body,
            prompt_ids: &p.prompt_ids,
            session_key: session_key(req.headers, p.user.as_deref()),
            rid,
            abort,
            endpoint,
            start: req.start,
        };
        return passthrough::forward(&req.served.relay, forward).await;
    }
    let name = Arc::clone(&req.served.model.name);
    let format = Formatter::new(req.kind, rid, name, p.include_usage).with_logprobs(p.logprobs);
    let native = Native {
        headers: req.headers,
        id: req.id,
        served: &req.served,
        endpoint,
        start: req.start,
    };
    if p.n > 1 || !p.batch.is_empty() {
        // Boxed: its state is larger than the one-choice path's, which is the common one.
        return Box::pin(several_choices(native, p, format)).await;
    }
    let format = format.with_echo(p.echo.clone());
    native_path(native, p, format).await
}

/// `n > 1` or a batch of prompts: one generation per choice (`relay::choices`), choice
/// `prompt * n + sample` with rid `<rid>-c<choice>`, the choice in four digits: SGLang aborts
/// every rid that starts with the one given, so no choice's rid may start another's.
async fn several_choices(
    req: Native<'_>,
    p: Box<Prepared>,
    format: Formatter,
) -> Result<Response, GatewayError> {
    let n = p.n.max(1) as usize;
    let session = session_key(req.headers, p.user.as_deref()).map(str::to_owned);
    let prompts =
        std::iter::once((p.prompt_ids, p.echo)).chain(p.batch.into_iter().map(|b| (b.ids, b.echo)));
    let mut specs = Vec::new();
    let mut formats = Vec::new();
    for (i, (ids, echo)) in prompts.enumerate() {
        for j in 0..n {
            let index = i * n + j;
            let spec = Spec {
                rid: format!("{}-c{index:04}", req.id.rid),
                prompt: ids.clone(),
                params: p.params.clone(),
                session_key: session.clone(),
                logprobs: p.logprobs,
                prefer: None,
                whole: false,
            };
            specs.push(spec.for_client(p.stream));
            formats.push(format.for_choice(index as u32, echo.clone()));
        }
    }
    let choices = Choices::start(&req.served.relay, specs, n, req.endpoint, req.start).await?;
    Ok(if p.stream {
        choices::stream(choices, formats, p.reasoning, p.tool_calls)
    } else {
        choices::collect(choices, formats, p.reasoning, p.tool_calls).await
    })
}

/// A request on the token-id path, whatever API it came in by.
pub struct Native<'a> {
    pub headers: &'a HeaderMap,
    pub id: &'a RequestId,
    pub served: &'a Served,
    pub endpoint: Endpoint,
    pub start: Instant,
}

/// The token-id path: the generation through the one exchange core (routing, retries,
/// migration, deadlines, metrics under `endpoint`), relayed in `grammar`'s API.
pub async fn native_path<G: Grammar>(
    req: Native<'_>,
    p: Box<Prepared>,
    grammar: G,
) -> Result<Response, GatewayError> {
    let spec = Spec {
        rid: req.id.rid.clone(),
        prompt: p.prompt_ids,
        params: p.params,
        session_key: session_key(req.headers, p.user.as_deref()).map(str::to_owned),
        logprobs: p.logprobs,
        prefer: None,
        whole: false,
    }
    .for_client(p.stream);
    let generation = Generation::start(&req.served.relay, spec, req.endpoint, req.start).await?;
    Ok(if p.stream {
        stream::respond(generation, grammar, p.reasoning, p.tool_calls)
    } else {
        collect::respond(generation, grammar, p.reasoning, p.tool_calls).await
    })
}

/// Sets `rid` in a JSON object body, replacing the client's: the worker's request is aborted by
/// it, and SGLang aborts by prefix (see [`RequestId`]).
pub fn with_rid(body: &Bytes, rid: &str) -> Bytes {
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body) {
        Ok(mut map) => {
            map.insert("rid".into(), serde_json::Value::from(rid));
            serde_json::to_vec(&map)
                .map(Bytes::from)
                .unwrap_or_else(|_| body.clone())
        }
        Err(_) => body.clone(),
    }
}

fn with_request_id(mut resp: Response, rid: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_body_gets_our_rid_even_when_it_has_one() {
        let body = Bytes::from_static(br#"{"model":"m","rid":"","n":2}"#);
        let out: serde_json::Value = serde_json::from_slice(&with_rid(&body, "r")).unwrap();
        assert_eq!(out, serde_json::json!({"model": "m", "rid": "r", "n": 2}));
    }
}
