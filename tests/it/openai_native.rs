//! What chat and completions requests used to leave to the worker's own OpenAI route, served on
//! the token-id path: `response_format` (and SGLang's `regex`/`ebnf`) as the constraint SGLang's
//! own route sends (its code is the oracle), checked here; logprobs from `/generate`'s
//! `return_logprob`, equal to what the worker's own route answers for the same tokens, whole,
//! streamed and across a migration.

use serde_json::{json, Value};

use crate::support::{self, MODEL};

async fn post(url: String, body: &Value) -> (u16, String, Value) {
    let r = support::post(url, body).await;
    let status = r.status().as_u16();
    let rid = r
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = r.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, rid, v)
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": MODEL, "max_tokens": 6, "ignore_eos": true,
                          "messages": [{"role": "user", "content": "hello"}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn response_format_reaches_the_worker_as_sglang_constrains_it() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "title": "Zürich"}},
                        "required": ["city"]});
    let cases = [
        json!({"response_format": {"type": "json_object"}}),
        json!({"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}}),
        json!({"regex": "[a-z]+"}),
        json!({"ebnf": "root ::= \"a\""}),
    ];
    let mut got = Vec::new();
    for extra in &cases {
        let (status, rid, v) = post(
            format!("{}/v1/chat/completions", gw.url),
            &chat(extra.clone()),
        )
        .await;
        assert_eq!(status, 200, "{extra}: {v}");
        let params = support::sent_to_generate(&sim.url, &rid).await["sampling_params"].clone();
        got.push(
            json!({"json_schema": params["json_schema"], "structural_tag": params["structural_tag"],
                        "regex": params["regex"], "ebnf": params["ebnf"]}),
        );
    }
    // Refused here, naming the field: a malformed schema, a json_schema without one, two
    // constraints at once.
    for (extra, param) in [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": {"type": "thing"}}}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "c"}}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_object"}, "regex": "a"}),
            "response_format",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"required": 1}}}]}),
            "tools",
        ),
    ] {
        let (status, _, v) = post(
            format!("{}/v1/chat/completions", gw.url),
            &chat(extra.clone()),
        )
        .await;
        assert_eq!(
            (status, v["error"]["param"].as_str()),
            (400, Some(param)),
            "{extra}: {v}"
        );
    }
    // Completions take SGLang's `json_schema` text too.
    let body = json!({"model": MODEL, "prompt": "hi", "max_tokens": 3, "json_schema": "{\"type\": \"string\"}"});
    let (status, rid, v) = post(format!("{}/v1/completions", gw.url), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        support::sent_to_generate(&sim.url, &rid).await["sampling_params"]["json_schema"],
        "{\"type\": \"string\"}"
    );

    let Some(py) = support::python::interpreter() else {
        return;
    };
    let bodies: Vec<Value> = cases.iter().map(|c| chat(c.clone())).collect();
    let oracle = support::python::run(
        &py,
        "tests/python/constraint_oracle.py",
        vec![String::new(), Value::from(bodies).to_string()],
    )
    .await;
    assert_eq!(oracle["results"], Value::from(got));
}

/// Chat's `logprobs.content` of every chunk, joined.
fn streamed_chat_logprobs(events: &[Value]) -> (Vec<Value>, String) {
    let mut entries = Vec::new();
    let mut text = String::new();
    for e in events {
        let choice = &e["choices"][0];
        text.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
        entries.extend(
            choice["logprobs"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
    }
    (entries, text)
}

async fn events(url: String, body: &Value) -> (String, Vec<Value>) {
    let (status, rid, v) = post(url, body).await;
    assert_eq!(status, 200, "{v}");
    let text = v.as_str().expect("an event stream").to_owned();
    let events = support::sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    (rid, events)
}

#[tokio::test]
async fn logprobs_come_from_generate_and_equal_the_worker_s_own_route() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let body = chat(json!({"logprobs": true, "top_logprobs": 3}));
    // The worker's own route answers the same tokens with the same logprobs: the oracle.
    let (_, _, own) = post(format!("{}/v1/chat/completions", sim.url), &body).await;
    let want = own["choices"][0]["logprobs"].clone();
    assert_eq!(want["content"].as_array().map(Vec::len), Some(6), "{own}");
    let (status, rid, v) = post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(status, 200, "{v}");
    support::sent_to_generate(&sim.url, &rid).await;
    assert_eq!(v["choices"][0]["logprobs"], want, "{v}");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (rid, evs) = events(format!("{}/v1/chat/completions", gw.url), &streamed).await;
    support::sent_to_generate(&sim.url, &rid).await;
    let (entries, text) = streamed_chat_logprobs(&evs);
    assert_eq!(Value::from(entries), want["content"], "{evs:?}");
    assert_eq!(
        Some(text.as_str()),
        own["choices"][0]["message"]["content"].as_str()
    );

    // Completions: `logprobs` is the top count; offsets are where each token starts.
    let body = json!({"model": MODEL, "prompt": "hello", "max_tokens": 5, "ignore_eos": true, "logprobs": 2});
    let (_, _, own) = post(format!("{}/v1/completions", sim.url), &body).await;
    let (status, rid, v) = post(format!("{}/v1/completions", gw.url), &body).await;
    assert_eq!(status, 200, "{v}");
    support::sent_to_generate(&sim.url, &rid).await;
    let (ours, theirs) = (&v["choices"][0]["logprobs"], &own["choices"][0]["logprobs"]);
    for field in ["tokens", "token_logprobs", "top_logprobs"] {
        assert_eq!(ours[field], theirs[field], "{field}: {v}");
    }
    let mut at = 0;
    for (offset, token) in ours["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .zip(ours["tokens"].as_array().unwrap())
    {
        assert_eq!(offset, at, "{v}");
        at += token.as_str().unwrap().chars().count();
    }
    // Not asked: null, as OpenAI.
    let (_, _, v) = post(format!("{}/v1/chat/completions", gw.url), &chat(json!({}))).await;
    assert!(v["choices"][0]["logprobs"].is_null(), "{v}");
}

#[tokio::test]
async fn logprobs_stay_whole_across_a_migration() {
    let dying = support::sim(&["--time-scale", "0.01"]).await;
    let healthy = support::sim(&["--time-scale", "0.01"]).await;
    support::set_faults(&dying, json!({"die_after_tokens": 3})).await;
    let gw = support::gateway(&[&dying, &healthy], &["--policy", "round_robin"]).await;
    let body = chat(json!({"max_tokens": 8, "logprobs": true, "top_logprobs": 1, "stream": true}));
    // Round robin: one of the two starts on the dying worker and is continued on the other.
    for _ in 0..2 {
        let (_, evs) = events(format!("{}/v1/chat/completions", gw.url), &body).await;
        let (entries, text) = streamed_chat_logprobs(&evs);
        assert_eq!(entries.len(), 8, "one entry per token, none twice: {evs:?}");
        let tokens: String = entries
            .iter()
            .map(|e| e["token"].as_str().unwrap())
            .collect();
        assert_eq!(tokens, text);
    }
    let metrics = support::metrics_text(&gw.url).await;
    assert!(support::metric_sum(&metrics, "switchboard_migrations_total") >= 1.0);
}

#[tokio::test]
async fn echo_legacy_functions_and_refusals_on_the_native_path() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let url = format!("{}/v1/completions", gw.url);
    // `echo`: the prompt's text before the answer (ids decoded), whole and streamed.
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    let ids = tok.encode("Once upon", false).expect("encode");
    for prompt in [json!("Once upon"), json!(ids)] {
        let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 3, "echo": true});
        let (status, rid, v) = post(url.clone(), &body).await;
        assert_eq!(status, 200, "{v}");
        support::sent_to_generate(&sim.url, &rid).await;
        let text = v["choices"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("Once upon") && text.len() > 9, "{v}");
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let (_, evs) = events(url.clone(), &streamed).await;
        let first = evs[0]["choices"][0]["text"].as_str().unwrap();
        assert!(first.starts_with("Once upon"), "{evs:?}");
    }
    // `suffix` (SGLang ignores it) and `echo` with logprobs (SGLang warns it cannot): refused.
    for (extra, param) in [
        (json!({"suffix": "end"}), "suffix"),
        (json!({"echo": true, "logprobs": 1}), "echo"),
    ] {
        let mut body = json!({"model": MODEL, "prompt": "hi", "max_tokens": 3});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, _, v) = post(url.clone(), &body).await;
        assert_eq!(
            (status, v["error"]["param"].as_str()),
            (400, Some(param)),
            "{v}"
        );
    }
    // The deprecated `functions` / `function_call`: a named call, constrained as `tools` are.
    let body = chat(
        json!({"functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
                           "function_call": {"name": "get_weather"}}),
    );
    let (status, rid, v) = post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(status, 200, "{v}");
    let schema =
        support::sent_to_generate(&sim.url, &rid).await["sampling_params"]["json_schema"].clone();
    let schema: Value = serde_json::from_str(schema.as_str().expect("a json_schema")).unwrap();
    assert_eq!(schema["maxItems"], 1, "{schema}");
}
