//! A hand-scripted SGLang worker: `/generate` answers with the SSE body a test builds (asked
//! for `stream: false`, with its last event as one JSON object, as SGLang's cumulative last
//! chunk is the whole answer), and every `/generate` body and `/abort_request` rid is recorded,
//! for wire shapes and faults the simulator does not produce.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use axum::Json;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use serde_json::{json, Value};
use switchboard::tokenize::Tokenizer;

/// One SSE chunk of a `/generate` stream, as the worker sends it.
pub fn event(chunk: &Value) -> Bytes {
    Bytes::from(format!("data: {chunk}\n\n"))
}

/// What the stream does after its scripted events.
pub enum End {
    /// `data: [DONE]`, then the body ends.
    Done,
    /// The connection breaks (the worker died mid-stream), once what came before had time
    /// to reach the gateway.
    Reset,
}

/// A body of `events` then `end`.
pub fn body(events: Vec<Value>, end: End) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    let events = futures_util::stream::iter(events.into_iter().map(|e| Ok(event(&e))));
    let end = async move {
        match end {
            End::Done => Ok(Bytes::from_static(b"data: [DONE]\n\n")),
            End::Reset => {
                // A body error drops the connection with what was not yet written.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                Err(std::io::Error::other("worker died"))
            }
        }
    };
    Box::pin(events.chain(futures_util::stream::once(end)))
}

pub type Reply =
    Arc<dyn Fn(&Value) -> BoxStream<'static, Result<Bytes, std::io::Error>> + Send + Sync>;

/// What a scripted worker saw.
#[derive(Clone, Default)]
pub struct Seen {
    /// Every `/generate` body, in arrival order.
    pub generate: Arc<Mutex<Vec<Value>>>,
    /// The `rid` of every `/abort_request`.
    pub aborts: Arc<Mutex<Vec<String>>>,
}

impl Seen {
    pub fn aborts(&self) -> Vec<String> {
        self.aborts.lock().expect("aborts").clone()
    }

    pub fn generate(&self) -> Vec<Value> {
        self.generate.lock().expect("generate").clone()
    }
}

/// Starts a worker whose `/generate` streams `reply(request body)`; returns its URL and what it saw.
pub async fn worker(reply: Reply) -> (String, Seen) {
    let seen = Seen::default();
    let (on_generate, on_abort) = (seen.clone(), seen.clone());
    let generate = move |Json(req): Json<Value>| {
        let body = reply(&req);
        let at_once = req["stream"] == false;
        on_generate.generate.lock().expect("generate").push(req);
        async move {
            if at_once {
                return whole_answer(body).await;
            }
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(body))
                .unwrap_or_default()
        }
    };
    let abort = move |Json(req): Json<Value>| {
        let rid = req["rid"].as_str().unwrap_or_default().to_owned();
        on_abort.aborts.lock().expect("aborts").push(rid);
        async { "" }
    };
    let app = axum::Router::new()
        .route("/generate", post(generate))
        .route("/abort_request", post(abort));
    (super::fake_worker(app).await, seen)
}

/// The answer to a request for `stream: false`: the scripted stream's last event, sent once the
/// stream has ended; a stream that breaks breaks this answer too, before any of it.
async fn whole_answer(mut body: BoxStream<'static, Result<Bytes, std::io::Error>>) -> Response {
    let mut sse = Vec::new();
    while let Some(part) = body.next().await {
        match part {
            Ok(bytes) => sse.extend_from_slice(&bytes),
            Err(e) => {
                let broken = futures_util::stream::once(async move { Err::<Bytes, _>(e) });
                return Response::new(Body::from_stream(broken));
            }
        }
    }
    let text = String::from_utf8_lossy(&sse);
    let last = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .last()
        .unwrap_or("{}")
        .to_owned();
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(last))
        .unwrap_or_default()
}

/// The text a worker that decodes these output ids sends: their decode, less a trailing
/// incomplete character and less a tail that may begin the stop string (both held back).
pub fn worker_text(tok: &Tokenizer, ids: &[u32], stop: &str) -> String {
    let text = tok.decode(ids, true).expect("decode");
    let text = text.trim_end_matches('\u{FFFD}');
    let held = (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&k| {
            text.is_char_boundary(text.len() - k) && stop.starts_with(&text[text.len() - k..])
        })
        .unwrap_or(0);
    text[..text.len() - held].to_owned()
}

/// Cumulative chunks for `ids`, one id a step, as SGLang's default stream sends them; the text is
/// what a worker decoding only these ids sends. The last one finishes if `finish`.
pub fn cumulative(tok: &Tokenizer, ids: &[u32], stop: &str, finish: bool) -> Vec<Value> {
    (1..=ids.len())
        .map(|n| {
            let done = finish && n == ids.len();
            let reason = done.then(|| json!({"type": "length", "length": n}));
            json!({"text": worker_text(tok, &ids[..n], stop), "output_ids": &ids[..n],
                   "meta_info": {"prompt_tokens": 5, "completion_tokens": n, "finish_reason": reason}})
        })
        .collect()
}
