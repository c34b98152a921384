//! `POST /v1/messages` (Anthropic) and `POST /v1/responses` (OpenAI Responses) through the
//! gateway: the official SDKs against two simulators with Qwen2.5's tokenizer, scripted to call
//! a tool, answer its result and hit a stop sequence (`--tool-call-parser qwen25`); the fields
//! each route maps into the worker's `/generate` request, as a scripted worker sees them; the
//! shared core (a refused worker retried, the endpoint label on the metrics); and the session
//! key (`metadata.user_id`, `prompt_cache_key`) used for routing.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{json, Value};

use crate::support::{self, scripted, Proc};

const MODEL: &str = "qwen2.5-0.5b-instruct";
const KEY: &str = "front-door-key";
/// The rules tests/python/{anthropic_sdk_check,openai_responses_check}.py rely on.
const RULES: [(&str, &str); 4] = [
    (
        "What is the weather in Paris?",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    ),
    ("18 degrees and sunny", "It is 18 degrees and sunny in Paris."),
    ("Count to five please", "one two three STOP four five"),
    // What a worker constrained to a forced choice's JSON list says.
    (
        "You must call a tool",
        r#"[{"name": "get_weather", "parameters": {"city": "Oslo"}}]"#,
    ),
];

async fn qwen_sim() -> Proc {
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    let sim = support::sim(&[
        "--tokenizer-path",
        &dir,
        "--model-name",
        MODEL,
        "--time-scale",
        "0.01",
        "--enable-cache-report",
    ])
    .await;
    for (matcher, output) in RULES {
        let rule = json!({"match": matcher, "output": output});
        let r = support::post(format!("{}/sim/script", sim.url), &rule).await;
        assert_eq!(r.status().as_u16(), 200);
    }
    sim
}

/// Two scripted sims behind a gateway with Qwen2.5's template, the qwen25 parser and a key.
async fn two_sims(extra: &[&str]) -> (Proc, Proc, Proc) {
    let (s1, s2) = (qwen_sim().await, qwen_sim().await);
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    let mut args = vec![
        "--model-path",
        &dir,
        "--tool-call-parser",
        "qwen25",
        "--api-key",
        KEY,
    ];
    args.extend_from_slice(extra);
    let gw = support::gateway(&[&s1, &s2], &args).await;
    (s1, s2, gw)
}

async fn sdk_check(script: &str) {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let (_s1, _s2, gw) = two_sims(&[]).await;
    let args = vec![gw.url.clone(), MODEL.into(), KEY.into()];
    let r = support::python::run(&py, script, args).await;
    assert_eq!(r["ok"], true, "{r}");
    let metrics = support::metrics_text(&gw.url).await;
    let endpoint = if script.contains("anthropic") {
        "messages"
    } else {
        "responses"
    };
    let ok = format!(
        r#"switchboard_requests_total{{endpoint="{endpoint}",model="{MODEL}",status="200"}}"#
    );
    assert!(
        support::metric(&metrics, &ok).is_some_and(|n| n >= 4.0),
        "{ok} in\n{metrics}"
    );
}

#[tokio::test]
async fn anthropic_sdk_create_stream_tools_and_stop_sequences() {
    sdk_check("tests/python/anthropic_sdk_check.py").await;
}

#[tokio::test]
async fn openai_sdk_responses_create_stream_tools_and_refusals() {
    sdk_check("tests/python/openai_responses_check.py").await;
}

async fn post_with_key(url: String, body: &Value) -> reqwest::Response {
    support::client()
        .post(url)
        .header("x-api-key", KEY)
        .json(body)
        .send()
        .await
        .expect("send")
}

/// A worker that answers every `/generate` with "Hello END" cut at the stop string `END`.
async fn stop_string_worker() -> (String, scripted::Seen) {
    let reply: scripted::Reply = Arc::new(|_req: &Value| {
        let chunk = json!({"text": "Hello ", "output_ids": [9707, 220],
            "meta_info": {"prompt_tokens": 12, "completion_tokens": 2, "cached_tokens": 5,
                          "finish_reason": {"type": "stop", "matched": "END"}}});
        scripted::body(vec![chunk], scripted::End::Done)
    });
    scripted::worker(reply).await
}

/// A gateway with the key in front of hand-made workers, once one is healthy.
async fn gateway_for(workers: &[&str], extra: &[&str]) -> Proc {
    let mut args = vec!["--api-key", KEY, "--worker-urls"];
    args.extend_from_slice(workers);
    args.extend_from_slice(extra);
    let gw = support::gateway(&[], &args).await;
    support::ready(&gw).await;
    gw
}

#[tokio::test]
async fn each_route_maps_its_fields_into_the_worker_request() {
    let (url, seen) = stop_string_worker().await;
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    let gw = gateway_for(&[&url], &["--model-path", &dir]).await;
    let messages = json!({"model": MODEL, "max_tokens": 33, "system": [{"type": "text", "text": "S"}],
        "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 7,
        "messages": [{"role": "user", "content": "hi"}]});
    let r = post_with_key(format!("{}/v1/messages", gw.url), &messages).await;
    assert_eq!(r.status().as_u16(), 200);
    let m: Value = r.json().await.unwrap();
    assert_eq!(m["stop_reason"], "stop_sequence", "{m}");
    assert_eq!(m["stop_sequence"], "END", "{m}");
    assert_eq!(m["content"], json!([{"type": "text", "text": "Hello "}]));
    assert_eq!(
        m["usage"],
        json!({"input_tokens": 7, "output_tokens": 2, "cache_read_input_tokens": 5,
                          "cache_creation_input_tokens": 0})
    );
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let responses = json!({"model": MODEL, "input": "hi", "max_output_tokens": 21, "temperature": 0.25,
        "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}}});
    let r = post_with_key(format!("{}/v1/responses", gw.url), &responses).await;
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 5);
    let sent = seen.generate();
    assert_eq!(sent.len(), 2);
    let (m, r) = (&sent[0]["sampling_params"], &sent[1]["sampling_params"]);
    assert_eq!(
        (
            &m["max_new_tokens"],
            &m["stop"],
            &m["temperature"],
            &m["top_p"],
            &m["top_k"]
        ),
        (
            &json!(33),
            &json!(["END"]),
            &json!(0.5),
            &json!(0.9),
            &json!(7)
        ),
        "{m}"
    );
    assert_eq!(
        (&r["max_new_tokens"], &r["temperature"]),
        (&json!(21), &json!(0.25))
    );
    let sent_schema: Value = serde_json::from_str(r["json_schema"].as_str().unwrap()).unwrap();
    assert_eq!(sent_schema, schema);
    // The system text is rendered by the template ahead of the user's.
    assert!(sent[0]["input_ids"]
        .as_array()
        .is_some_and(|ids| ids.len() > 3));
}

#[tokio::test]
async fn a_worker_that_refuses_is_retried_on_both_routes() {
    let full = axum::Router::new().route(
        "/generate",
        axum::routing::post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "full").into_response() }),
    );
    let full = support::fake_worker(full).await;
    let (ok, seen) = stop_string_worker().await;
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    let gw = gateway_for(
        &[&full, &ok],
        &["--model-path", &dir, "--policy", "round_robin"],
    )
    .await;
    for _ in 0..2 {
        let m = json!({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]});
        let r = post_with_key(format!("{}/v1/messages", gw.url), &m).await;
        assert_eq!(r.status().as_u16(), 200);
        let r = json!({"model": MODEL, "input": "x", "stream": true});
        let r = post_with_key(format!("{}/v1/responses", gw.url), &r).await;
        assert_eq!(r.status().as_u16(), 200);
        let text = r.text().await.unwrap();
        assert!(text.contains("event: response.completed"), "{text}");
    }
    assert_eq!(seen.generate().len(), 4);
    let metrics = support::metrics_text(&gw.url).await;
    assert!(
        support::metric(&metrics, "switchboard_retries_total").is_some_and(|n| n >= 2.0),
        "{metrics}"
    );
}

/// Which sim served each of `rids`.
async fn served_by(sims: [&Proc; 2], rids: &[String]) -> Vec<usize> {
    let mut logs = Vec::new();
    for s in sims {
        logs.push(support::sim_request_log(&s.url).await);
    }
    rids.iter()
        .map(|rid| {
            logs.iter()
                .position(|log| log.iter().any(|e| e["rid"] == rid.as_str()))
                .unwrap_or_else(|| panic!("{rid} reached no sim"))
        })
        .collect()
}

#[tokio::test]
async fn the_session_key_keeps_a_user_on_one_worker() {
    let (s1, s2, gw) = two_sims(&["--policy", "consistent_hash"]).await;
    for (path, user_field) in [
        (
            "/v1/messages",
            json!({"metadata": {"user_id": "USER"}, "max_tokens": 2}),
        ),
        (
            "/v1/responses",
            json!({"prompt_cache_key": "USER", "max_output_tokens": 2}),
        ),
    ] {
        let mut by_user = Vec::new();
        for user in 0..12 {
            let mut rids = Vec::new();
            for turn in 0..2 {
                let text = format!("turn {turn} of a conversation number {user}");
                let mut body = json!({"model": MODEL, "messages": [{"role": "user", "content": text}], "input": text});
                let o = body.as_object_mut().unwrap();
                o.remove(if path == "/v1/messages" {
                    "input"
                } else {
                    "messages"
                });
                let user_json = user_field
                    .to_string()
                    .replace("USER", &format!("user-{user}"));
                o.extend(
                    serde_json::from_str::<Value>(&user_json)
                        .unwrap()
                        .as_object()
                        .unwrap()
                        .clone(),
                );
                let r = post_with_key(format!("{}{path}", gw.url), &body).await;
                assert_eq!(r.status().as_u16(), 200, "{path}");
                rids.push(r.headers()["x-request-id"].to_str().unwrap().to_owned());
            }
            let sims = served_by([&s1, &s2], &rids).await;
            assert_eq!(
                sims[0], sims[1],
                "{path}: user {user} moved between workers"
            );
            by_user.push(sims[0]);
        }
        // Keyed by the user, not by the prompt (whose first page, the template's, is the same):
        // twelve users do not all hash to one of two workers.
        assert!(
            by_user.contains(&0) && by_user.contains(&1),
            "{path}: {by_user:?}"
        );
    }
}

#[tokio::test]
async fn a_forced_tool_choice_is_constrained_and_read_as_a_call() {
    let (_s1, _s2, gw) = two_sims(&[]).await;
    let tools = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    for stream in [false, true] {
        let body = json!({"model": MODEL, "max_tokens": 64, "stream": stream, "tools": tools,
            "tool_choice": {"type": "tool", "name": "get_weather"},
            "messages": [{"role": "user", "content": "You must call a tool"}]});
        let r = post_with_key(format!("{}/v1/messages", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let text = r.text().await.unwrap();
        if stream {
            assert!(
                text.contains(r#""partial_json":"{\"city\": \"Oslo\"}""#),
                "{text}"
            );
            assert!(text.contains(r#""stop_reason":"tool_use""#), "{text}");
        } else {
            let m: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(m["stop_reason"], "tool_use", "{m}");
            assert_eq!(m["content"][0]["input"], json!({"city": "Oslo"}), "{m}");
            assert_eq!(m["content"].as_array().unwrap().len(), 1, "{m}");
        }
    }
    let body = json!({"model": MODEL, "input": "You must call a tool", "tool_choice": "required",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]});
    let r = post_with_key(format!("{}/v1/responses", gw.url), &body).await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["output"][0]["type"], "function_call", "{v}");
    assert_eq!(v["output"][0]["arguments"], r#"{"city": "Oslo"}"#, "{v}");
}

#[tokio::test]
async fn a_forced_tool_choice_sends_sglangs_json_list_constraint() {
    let (url, seen) = stop_string_worker().await;
    let dir = support::repo_path(&format!("assets/tokenizers/{MODEL}"));
    let gw = gateway_for(&[&url], &["--model-path", &dir]).await;
    let params = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    let body = json!({"model": MODEL, "max_tokens": 8, "tool_choice": {"type": "any"},
        "tools": [{"name": "a", "input_schema": params}, {"name": "b"}],
        "messages": [{"role": "user", "content": "x"}]});
    let r = post_with_key(format!("{}/v1/messages", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let sent = &seen.generate()[0]["sampling_params"];
    let schema: Value = serde_json::from_str(sent["json_schema"].as_str().unwrap()).unwrap();
    let item = |name: &str, p: Value| {
        json!({"properties": {"name": {"type": "string", "enum": [name]},
        "parameters": p}, "required": ["name", "parameters"]})
    };
    assert_eq!(
        schema,
        json!({"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [
            item("a", params), item("b", json!({"type": "object", "properties": {}}))]}})
    );
}
