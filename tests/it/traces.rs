//! OpenTelemetry traces, received by a real OTLP receiver (Arize Phoenix) over both transports:
//! one span per request continuing the client's `traceparent`, a child per stage, the GenAI
//! attributes, and the `traceparent` passed on to the worker.

use serde_json::{json, Value};

use crate::support::phoenix::{self, Phoenix};
use crate::support::{self, client, gateway_env, sim};

const MODEL: &str = "smollm2-135m-instruct";
const STAGES: [&str; 6] = [
    "parse",
    "template_tokenize",
    "route",
    "upstream_first_token",
    "upstream_connect",
    "relay",
];

/// Sent by the gateway within ~100 ms instead of the batch processor's default 5 s.
const QUICK_BATCHES: [(&str, &str); 1] = [("OTEL_BSP_SCHEDULE_DELAY", "100")];

fn traceparent(trace_id: &str, parent: &str) -> String {
    format!("00-{trace_id}-{parent}-01")
}

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} span in {spans:#?}"))
}

/// The request span and its stages, checked against what the client was told.
fn check_trace(spans: &[Value], client_parent: &str, usage: &Value, worker: &str) {
    let request = named(spans, &format!("chat {MODEL}"));
    assert_eq!(
        request["parent_id"], client_parent,
        "continues the client's span"
    );
    let id = request["context"]["span_id"].as_str().unwrap();
    let a = &request["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.request.model"], MODEL);
    assert_eq!(a["gen_ai.usage.input_tokens"], usage["prompt_tokens"]);
    assert_eq!(a["gen_ai.usage.output_tokens"], usage["completion_tokens"]);
    assert_eq!(a["gen_ai.response.finish_reasons"], json!(["length"]));
    assert_eq!(a["http.response.status_code"], 200);
    assert!(a["gen_ai.server.time_to_first_token"].as_f64().unwrap() > 0.0);
    assert_eq!(a["server.address"], worker);
    assert!(a["gen_ai.response.id"]
        .as_str()
        .is_some_and(|r| r.len() == 32));
    let upstream = named(spans, "upstream_first_token");
    for stage in STAGES {
        let span = named(spans, stage);
        let parent = if stage == "upstream_connect" {
            upstream["context"]["span_id"].as_str().unwrap()
        } else {
            id
        };
        assert_eq!(span["parent_id"], parent, "{stage}'s parent");
    }
    assert_eq!(upstream["attributes"]["server.address"], worker);
}

/// The worker got the trace, with the gateway's `upstream_connect` span as the parent.
async fn check_worker_got(sim_url: &str, trace_id: &str, spans: &[Value]) {
    let seen: Vec<Value> = client()
        .get(format!("{sim_url}/sim/traceparents"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let connect = named(spans, "upstream_connect")["context"]["span_id"]
        .as_str()
        .unwrap();
    let expected = traceparent(trace_id, connect);
    assert!(
        seen.iter()
            .any(|s| s["traceparent"] == expected.as_str() && s["path"] == "/generate"),
        "{expected} not among {seen:#?}"
    );
}

#[tokio::test]
async fn spans_reach_phoenix_over_http_and_grpc_and_the_worker_continues_the_trace() {
    let Some(cmd) = phoenix::command() else {
        return;
    };
    let phoenix = Phoenix::start(&cmd).await;
    let sim = sim(&[]).await;
    let over_http = gateway_env(
        &[&sim],
        &["--otlp-traces-endpoint", &phoenix.http],
        &QUICK_BATCHES,
    )
    .await;
    let over_grpc = gateway_env(
        &[&sim],
        &[
            "--otlp-protocol",
            "grpc",
            "--otlp-traces-endpoint",
            &phoenix.grpc,
        ],
        &QUICK_BATCHES,
    )
    .await;

    // Not streaming, over http/protobuf.
    let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let resp = client()
        .post(format!("{}/v1/chat/completions", over_http.url))
        .header("traceparent", traceparent(trace, parent))
        .json(&json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let mut names = vec![format!("chat {MODEL}")];
    names.extend(STAGES.iter().map(|s| s.to_string()));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let spans = phoenix.wait_for(trace, &names).await;
    check_trace(&spans, parent, &body["usage"], &sim.url);
    check_worker_got(&sim.url, trace, &spans).await;

    // Streaming, over gRPC: the request span ends with the stream, usage included.
    let (trace, parent) = ("5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8");
    let resp = client()
        .post(format!("{}/v1/chat/completions", over_grpc.url))
        .header("traceparent", traceparent(trace, parent))
        .json(&json!({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 7,
                      "stream": true, "stream_options": {"include_usage": true}}))
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    let events = support::sse_data(&text);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    let spans = phoenix.wait_for(trace, &names).await;
    check_trace(&spans, parent, &usage["usage"], &sim.url);
    check_worker_got(&sim.url, trace, &spans).await;
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_traced_or_passed_on() {
    let sim = sim(&[]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let resp = client()
        .post(format!("{}/v1/chat/completions", gw.url))
        .header(
            "traceparent",
            traceparent("6bf92f3577b34da6a3ce929d0e0e4738", "20f067aa0ba902b9"),
        )
        .json(&json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen: Vec<Value> = client()
        .get(format!("{}/sim/traceparents", sim.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(seen.is_empty(), "{seen:?}");
}
