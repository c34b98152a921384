//! `switchboard sim --sglang-version`: where SGLang 0.5.9 and 0.5.23 answer differently, the
//! simulator answers as each does (docs/simulator.md names the source of each behaviour).

use crate::support::{self, MODEL};

use serde_json::{json, Value};

pub(crate) async fn generate(sim: &str, body: Value) -> (u16, Result<String, String>) {
    let r = support::post(format!("{sim}/generate"), &body).await;
    let status = r.status().as_u16();
    (status, r.text().await.map_err(|e| e.to_string()))
}

pub(crate) fn events(body: &str) -> Vec<Value> {
    support::sse_data(body)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[tokio::test]
async fn streaming_deltas_differ_by_version() {
    for (version, text_is_cumulative) in [("0.5.9", true), ("0.5.23", false)] {
        // A token every 20 ms, so the reader keeps up and sees one chunk per token.
        let sim = support::sim(&[
            "--sglang-version",
            version,
            "--stream-output",
            "--decode-base-us",
            "20000",
        ])
        .await;
        let (_, body) = generate(&sim.url, json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 6, "ignore_eos": true}, "stream": true})).await;
        let chunks = events(&body.expect("body"));
        let ids: usize = chunks
            .iter()
            .map(|c| c["output_ids"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(ids, 6, "{version}: output_ids are deltas");
        let texts: Vec<&str> = chunks.iter().filter_map(|c| c["text"].as_str()).collect();
        let last = *texts.last().expect("text");
        let joined: String = texts.concat();
        if text_is_cumulative {
            assert!(
                texts.windows(2).all(|w| w[1].starts_with(w[0])),
                "{version}: {texts:?}"
            );
            assert_ne!(joined, last, "{version}: more than one chunk");
        } else {
            assert!(
                joined.len() > last.len(),
                "{version}: text deltas {texts:?}"
            );
        }
    }
}

#[tokio::test]
async fn context_bound_and_validation_follow_each_version() {
    for (version, exact_fit) in [("0.5.9", 400), ("0.5.23", 200)] {
        let sim = support::sim(&[
            "--sglang-version",
            version,
            "--context-length",
            "16",
            "--zero-latency",
            "--eos-probability",
            "0.5",
        ])
        .await;
        // prompt + max_new_tokens == context: 0.5.9 refuses (`>=`), 0.5.23 does not (`>`).
        let (status, _) = generate(&sim.url, json!({"input_ids": (1..=10).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 6}})).await;
        assert_eq!(status, exact_fit, "{version}");
        // Over the context is refused even when EOS would end the answer early.
        let (status, _) = generate(&sim.url, json!({"input_ids": (1..=10).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 7}})).await;
        assert_eq!(status, 400, "{version}");
        for bad in [json!({"temperature": -1}), json!({"top_p": 2})] {
            let (status, _) = generate(
                &sim.url,
                json!({"input_ids": [1, 2], "sampling_params": bad}),
            )
            .await;
            assert_eq!(status, 400, "{version} {bad}");
        }
        let (status, body) = generate(&sim.url, json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "stop_regex": "\\d+"}})).await;
        assert_eq!(status, 200, "{version} stop_regex: {body:?}");
    }
}

#[tokio::test]
async fn a_stream_refused_by_the_front_end_is_a_200_with_an_error_event() {
    for (version, code) in [("0.5.9", Value::Null), ("0.5.23", json!(400))] {
        let sim = support::sim(&["--sglang-version", version, "--context-length", "16"]).await;
        let (status, body) = generate(
            &sim.url,
            json!({"input_ids": (1..=20).collect::<Vec<u32>>(), "stream": true}),
        )
        .await;
        let body = body.expect("body");
        assert_eq!(status, 200, "{version}");
        let first = &events(&body)[0];
        assert!(
            first["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("context length")),
            "{version}: {body}"
        );
        assert_eq!(first["error"]["code"], code, "{version}: {body}");
        assert!(
            body.trim_end().ends_with("data: [DONE]"),
            "{version}: {body}"
        );
    }
}

#[tokio::test]
async fn an_unknown_sampling_key_is_a_400_on_0_5_23_and_uncaught_on_0_5_9() {
    let new = support::sim(&["--sglang-version", "0.5.23"]).await;
    let old = support::sim(&["--sglang-version", "0.5.9"]).await;
    let body =
        |stream| json!({"input_ids": [1, 2], "sampling_params": {"bogus": 1}, "stream": stream});
    assert_eq!(generate(&new.url, body(false)).await.0, 400);
    assert_eq!(generate(&new.url, body(true)).await.0, 400);
    assert_eq!(generate(&old.url, body(false)).await.0, 500);
    let (status, rest) = generate(&old.url, body(true)).await;
    assert_eq!(status, 200);
    assert!(
        rest.is_err() || !rest.as_deref().unwrap_or("").contains("[DONE]"),
        "{rest:?}"
    );
}

#[tokio::test]
async fn queue_full_in_an_openai_stream_differs_by_version() {
    for version in ["0.5.9", "0.5.23"] {
        let (sim, _held) = support::full_sim(version).await;
        let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": true});
        let r = support::post(format!("{}/v1/chat/completions", sim.url), &chat).await;
        assert_eq!(r.status().as_u16(), 200, "{version}");
        let rest = r.text().await;
        if version == "0.5.9" {
            assert!(
                rest.as_deref().map_or(true, |t| !t.contains("[DONE]")),
                "{rest:?}"
            );
        } else {
            let text = rest.expect("body");
            assert_eq!(events(&text)[0]["error"]["code"], 503, "{text}");
            assert!(text.contains("[DONE]"));
        }
        // /generate streams get the scheduler's abort chunk in both versions.
        let (status, body) = generate(&sim.url, json!({"input_ids": [4], "stream": true})).await;
        let body = body.expect("body");
        assert_eq!(status, 200);
        assert_eq!(
            events(&body)[0]["meta_info"]["finish_reason"]["status_code"],
            503,
            "{body}"
        );
    }
}

#[tokio::test]
async fn info_routes_and_metrics_are_as_sglang_sends_them() {
    for version in ["0.5.9", "0.5.23"] {
        let sim = support::sim(&["--sglang-version", version, "--zero-latency"]).await;
        let info = support::get_json(&format!("{}/server_info", sim.url)).await;
        assert_eq!(info["version"], version);
        assert_eq!(info["context_length"], Value::Null, "null unless set");
        let model = support::get_json(&format!("{}/model_info", sim.url)).await;
        assert!(model.get("max_context_length").is_none(), "{model}");
        let loads = support::get_json(&format!("{}/v1/loads", sim.url)).await;
        let has_uncached = loads["loads"][0]
            .get("num_waiting_uncached_tokens")
            .is_some();
        assert_eq!(has_uncached, version == "0.5.23", "{loads}");
        let get_load = support::client()
            .get(format!("{}/get_load", sim.url))
            .send()
            .await
            .expect("get_load")
            .status()
            .as_u16();
        assert_eq!(get_load, if version == "0.5.9" { 200 } else { 404 });
        let (status, _) = generate(
            &sim.url,
            json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}}),
        )
        .await;
        assert_eq!(status, 200);
        let e2e = support::sim_metric(&sim.url, "sglang:e2e_request_latency_seconds_count").await;
        assert_eq!(
            e2e, 1.0,
            "{version}: the e2e histogram records finished requests"
        );
    }
}

#[tokio::test]
async fn a_second_live_request_with_the_same_rid() {
    for version in ["0.5.9", "0.5.23"] {
        let sim = support::sim(&["--sglang-version", version, "--decode-base-us", "20000"]).await;
        let body = |stream| json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 50, "ignore_eos": true}, "stream": stream, "rid": "same"});
        let mut first = support::post(format!("{}/generate", sim.url), &body(true)).await;
        first.chunk().await.expect("first chunk");
        let (status, second) = generate(&sim.url, body(true)).await;
        let second = second.expect("body");
        assert_eq!(status, 200, "{version}");
        if version == "0.5.23" {
            // Refused, as a stream's front-end error; the first runs on to its end.
            assert!(
                events(&second)[0]["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("Duplicate request ID")),
                "{second}"
            );
            assert!(first.text().await.expect("rest").contains("[DONE]"));
        } else {
            // The second takes the rid over and completes; the first hears nothing more. What
            // the first was sent before the takeover (a slow machine lets a token or two through
            // between its first chunk and the second's arrival) may still be read, but never its
            // end: it is silent, not finished.
            assert!(second.contains("\"length\""), "{second}");
            let mut before_takeover = String::new();
            let silent = loop {
                let next =
                    tokio::time::timeout(std::time::Duration::from_millis(500), first.chunk())
                        .await;
                match next {
                    Err(_) => break true,
                    Ok(Ok(Some(bytes))) if before_takeover.len() < 64 * 1024 => {
                        before_takeover.push_str(&String::from_utf8_lossy(&bytes));
                    }
                    _ => break false,
                }
            };
            assert!(
                silent && !before_takeover.contains("[DONE]"),
                "{version}: the orphaned stream ended or ran on: {before_takeover}"
            );
        }
    }
}

#[tokio::test]
async fn an_aborted_chat_stream_still_ends_with_its_finish_and_usage() {
    let sim = support::sim(&["--decode-base-us", "20000"]).await;
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500,
                      "stream": true, "stream_options": {"include_usage": true}, "rid": "chat-1"});
    let mut r = support::post(format!("{}/v1/chat/completions", sim.url), &chat).await;
    r.chunk().await.expect("first chunk");
    support::post(
        format!("{}/abort_request", sim.url),
        &json!({"rid": "chat-1"}),
    )
    .await;
    let rest = r.text().await.expect("rest");
    let chunks = events(&rest);
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("abort"), "{rest}");
    let usage = chunks.last().expect("chunks")["usage"].clone();
    assert!(
        usage["completion_tokens"].as_u64().is_some_and(|n| n >= 1),
        "{rest}"
    );
    assert!(rest.contains("[DONE]"));
}

#[tokio::test]
async fn openai_errors_are_bad_request_error_objects() {
    let sim = support::sim(&[]).await;
    let r = support::post(
        format!("{}/v1/chat/completions", sim.url),
        &json!({"model": MODEL, "messages": []}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(
        (v["object"].as_str(), v["type"].as_str(), v["code"].as_u64()),
        (Some("error"), Some("BadRequestError"), Some(400)),
        "{v}"
    );
}

/// `sampling_params.stream_interval` k: both releases stream the first token at once, then a
/// chunk per k tokens (0.5.9 at lengths 1 more than a multiple of k, 0.5.23 once k tokens are
/// unsent: the same points when a step brings one token), and the last one.
#[tokio::test]
async fn a_stream_interval_sends_the_first_token_then_every_k() {
    for version in ["0.5.9", "0.5.23"] {
        // A token every 20 ms, so the reader keeps up and no chunks are collapsed.
        let sim = support::sim(&["--sglang-version", version, "--decode-base-us", "20000"]).await;
        let params = json!({"max_new_tokens": 10, "ignore_eos": true, "stream_interval": 4});
        let (_, body) = generate(
            &sim.url,
            json!({"input_ids": [1, 2, 3], "sampling_params": params, "stream": true}),
        )
        .await;
        let counts: Vec<u64> = events(&body.expect("body"))
            .iter()
            .filter_map(|c| c["meta_info"]["completion_tokens"].as_u64())
            .collect();
        assert_eq!(counts, vec![1, 5, 9, 10], "{version}");
    }
}
