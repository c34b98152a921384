//! The gateway core end to end against simulated workers: token ids sent upstream, client
//! disconnects, metrics.

use crate::support;

use std::time::{Duration, Instant};

use crate::support::MODEL;
use serde_json::{json, Value};

/// Acceptance: the ids a worker receives equal HF tokenizer + chat template (golden files).
async fn golden_ids_reach_the_worker(tokenizer: &str) {
    let dir = support::repo_path(&format!("assets/tokenizers/{tokenizer}"));
    let sim = support::sim(&[
        "--tokenizer-path",
        &dir,
        "--time-scale",
        "0.01",
        "--model-name",
        tokenizer,
    ])
    .await;
    let gw = support::gateway(&[&sim], &["--model-path", &dir]).await;
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/golden.json")).expect("golden.json"),
    )
    .expect("json");
    let c = support::client();
    let mut checked = 0;
    for (i, case) in golden["chat"]
        .as_array()
        .expect("chat cases")
        .iter()
        .enumerate()
    {
        if case.get("add_generation_prompt") != Some(&Value::Bool(true)) {
            continue; // the gateway always asks for the assistant's turn
        }
        let mut body = json!({"model": tokenizer, "messages": case["messages"], "max_tokens": 2});
        if let Some(tools) = case.get("tools") {
            body["tools"] = tools.clone();
        }
        let r = c
            .post(format!("{}/v1/chat/completions", gw.url))
            .json(&body)
            .send()
            .await
            .expect("send");
        // Without a client id the header carries the rid the worker got (ours, never the client's).
        let rid = r
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .expect("x-request-id")
            .to_owned();
        assert_eq!(
            r.status().as_u16(),
            200,
            "case {i}: {}",
            r.text().await.unwrap_or_default()
        );
        let seen: Vec<Value> = support::sim_request_log(&sim.url).await;
        let got = seen
            .iter()
            .find(|s| s["rid"] == rid.as_str())
            .unwrap_or_else(|| panic!("worker never saw {rid}"));
        assert_eq!(
            got["input_ids"], case["input_ids"],
            "case {i} of {tokenizer}"
        );
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} golden cases checked");
}

#[tokio::test]
async fn golden_ids_qwen25() {
    golden_ids_reach_the_worker("qwen2.5-0.5b-instruct").await;
}

#[tokio::test]
async fn golden_ids_mistral() {
    golden_ids_reach_the_worker("mistral-7b-instruct-v0.1").await;
}

#[tokio::test]
async fn golden_ids_qwen3() {
    golden_ids_reach_the_worker("qwen3").await;
}

/// A 2,000-token chat stream, started (200).
async fn open_long_stream(gw: &str) -> reqwest::Response {
    let body = json!({"model": MODEL, "messages": [{"role":"user","content":"tell me a long story"}], "max_tokens": 2000, "stream": true});
    let resp = support::post(format!("{gw}/v1/chat/completions"), &body).await;
    assert_eq!(resp.status().as_u16(), 200);
    resp
}

/// Acceptance: a client that leaves mid-stream makes the gateway abort the worker's request.
#[tokio::test]
async fn client_disconnect_mid_stream_aborts_on_worker() {
    // Slow decode so the stream is still running when the client leaves.
    let sim = support::sim(&["--decode-base-us", "20000"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let mut resp = open_long_stream(&gw.url).await;
    let first = resp.chunk().await.expect("chunk").expect("some bytes");
    assert!(String::from_utf8_lossy(&first).contains("chat.completion.chunk"));
    assert_eq!(support::sim_busy(&sim.url).await, 1);
    drop(resp); // the client goes away
    support::sim_aborted_and_idle(&sim.url).await;
    let text = support::metrics_text(&gw.url).await;
    assert_eq!(
        support::metric_sum(&text, "switchboard_client_aborts_total"),
        1.0
    );
}

/// A non-streaming client that gives up is treated the same way.
#[tokio::test]
async fn client_disconnect_non_stream_aborts_on_worker() {
    let sim = support::sim(&["--decode-base-us", "20000"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content":"hi"}], "max_tokens": 2000});
    let c = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let r = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&body)
        .send()
        .await;
    assert!(
        r.is_err(),
        "the request should have timed out on the client side"
    );
    support::sim_aborted_and_idle(&sim.url).await;
}

/// What a worker generates between the client leaving and the abort landing is counted: here
/// the worker's scheduler takes the abort 300 ms late, at one token per 20 ms.
#[tokio::test]
async fn tokens_generated_after_the_client_left_are_counted() {
    let sim = support::sim(&[
        "--decode-base-us",
        "20000",
        "--fault-abort-delay-secs",
        "0.3",
    ])
    .await;
    let gw = support::gateway(&[&sim], &[]).await;
    let mut resp = open_long_stream(&gw.url).await;
    for _ in 0..5 {
        resp.chunk().await.expect("chunk").expect("some bytes");
    }
    drop(resp);
    support::sim_aborted_and_idle(&sim.url).await;
    let generated = support::sim_metric(&sim.url, "sglang:generation_tokens_total").await;
    support::eventually("the leftover tokens are counted", || async {
        let text = support::metrics_text(&gw.url).await;
        let received = support::metric_sum(&text, "switchboard_completion_tokens_total");
        let left = support::metric_sum(&text, "switchboard_tokens_after_client_left_total");
        received > 0.0 && left > 0.0 && received + left == generated
    })
    .await;
    let text = support::metrics_text(&gw.url).await;
    let left = support::metric_sum(&text, "switchboard_tokens_after_client_left_total");
    // 300 ms at 20 ms a token, less scheduling slack.
    assert!(
        left >= 5.0,
        "only {left} tokens counted after the client left"
    );
}

/// Acceptance: after a run, TTFT/E2E/TPOT counts equal the requests made, ITL counts the
/// tokens after the first chunk, and the E2E sum fits inside what the client measured.
#[tokio::test]
async fn metrics_match_the_requests_made() {
    let sim1 = support::sim(&["--decode-base-us", "3000"]).await;
    let sim2 = support::sim(&["--decode-base-us", "3000"]).await;
    let gw = support::gateway(&[&sim1, &sim2], &[]).await;
    let c = support::client();
    let n = 12;
    let mut client_total = 0.0;
    let mut completion_tokens = 0;
    for i in 0..n {
        let stream = i % 2 == 0;
        let body = json!({"model": MODEL, "messages": [{"role":"user","content": format!("question {i}")}], "max_tokens": 8, "stream": stream,
            "stream_options": {"include_usage": true}});
        let t = Instant::now();
        let r = c
            .post(format!("{}/v1/chat/completions", gw.url))
            .json(&body)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status().as_u16(), 200);
        let text = r.text().await.expect("body");
        client_total += t.elapsed().as_secs_f64();
        completion_tokens += 8;
        if stream {
            assert_eq!(
                support::sse_data(&text).last().map(String::as_str),
                Some("[DONE]")
            );
        }
    }
    let text = c
        .get(format!("{}/metrics", gw.url))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let count = |name: &str| {
        support::metric_sum(
            &text,
            &format!("switchboard_{name}_count{{endpoint=\"chat\""),
        )
    };
    assert_eq!(count("time_to_first_token_seconds"), n as f64);
    assert_eq!(count("e2e_request_latency_seconds"), n as f64);
    // Per output token only where the tokens came in more than one chunk: the streams. The
    // others' 8 tokens came at once (`--whole-answers auto`), first token and last together.
    assert_eq!(count("time_per_output_token_seconds"), (n / 2) as f64);
    let itl = count("inter_token_latency_seconds");
    assert!(
        itl > 0.0 && itl <= (completion_tokens - n) as f64,
        "itl count {itl}"
    );
    let e2e_sum = support::metric_sum(
        &text,
        "switchboard_e2e_request_latency_seconds_sum{endpoint=\"chat\"",
    );
    assert!(
        e2e_sum > 0.0 && e2e_sum <= client_total,
        "gateway E2E {e2e_sum}, client-measured {client_total}"
    );
    assert_eq!(
        support::metric_sum(&text, "switchboard_completion_tokens_total"),
        completion_tokens as f64
    );
    assert_eq!(support::metric_sum(&text, "switchboard_requests_total{endpoint=\"chat\",model=\"smollm2-135m-instruct\",status=\"200\"}"), n as f64);
    assert_eq!(support::gateway_in_flight(&gw.url).await, 0.0);
}

/// Workers started with `--skip-tokenizer-init` send ids only: the gateway detokenizes,
/// applies stop strings itself, and aborts the worker's now unwanted generation.
#[tokio::test]
async fn ids_only_workers_are_detokenized_with_stop_strings() {
    let plain = support::sim(&["--time-scale", "0.01"]).await;
    let ids_only = support::sim(&["--skip-tokenizer-init", "--decode-base-us", "2000"]).await;
    let gw_plain = support::gateway(&[&plain], &[]).await;
    let gw_ids = support::gateway(&[&ids_only], &[]).await;
    let c = support::client();
    let ask = |url: String, extra: Value| {
        let c = c.clone();
        async move {
            let mut body = json!({"model": MODEL, "messages": [{"role":"user","content":"same prompt"}], "max_tokens": 24});
            body.as_object_mut()
                .expect("obj")
                .extend(extra.as_object().cloned().unwrap_or_default());
            let v: Value = c
                .post(format!("{url}/v1/chat/completions"))
                .json(&body)
                .send()
                .await
                .expect("send")
                .json()
                .await
                .expect("json");
            v
        }
    };
    let reference = ask(gw_plain.url.clone(), json!({})).await;
    let text = reference["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_owned();
    let detok = ask(gw_ids.url.clone(), json!({})).await;
    assert_eq!(
        detok["choices"][0]["message"]["content"],
        text.as_str(),
        "detokenized text differs"
    );
    // A word from the middle becomes a stop string.
    let words: Vec<&str> = text.split(' ').filter(|w| !w.is_empty()).collect();
    let stop = format!(" {}", words[words.len() / 2]);
    let cut = &text[..text.find(&stop).expect("stop in text")];
    let stopped = ask(gw_ids.url.clone(), json!({"stop": [stop], "stream": false})).await;
    assert_eq!(stopped["choices"][0]["message"]["content"], cut);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    support::sim_aborted_and_idle(&ids_only.url).await;
}

#[tokio::test]
async fn separate_metrics_listener_and_json_logs() {
    let sim = support::sim(&[]).await;
    let gw = support::gateway(&[&sim], &["--prometheus-port", "0", "--log-json"]).await;
    let metrics_url = gw.metrics_url.as_deref().expect("metrics listener address");
    assert_ne!(metrics_url, gw.url);
    let text = support::metrics_text(metrics_url).await;
    assert!(text.contains("switchboard_worker_healthy"), "{text}");
}

/// The tokenizer's piece cache reports what it holds: its start-up self-check, then the new
/// words of a prompt too.
#[tokio::test]
async fn tokenizer_cache_size_is_exported() {
    let sim = support::sim(&[]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let gauge = |text: &str| support::metric(text, "switchboard_tokenizer_cache_bytes");
    let before = gauge(&support::metrics_text(&gw.url).await).expect("gauge exported");
    // Letters only: digits would be cut apart and cached one by one.
    let letter = |n: usize| char::from(b'a' + (n % 26) as u8);
    let words: String = (0..300)
        .map(|i| format!(" zebra{}{}", letter(i / 26), letter(i)))
        .collect();
    let body =
        json!({"model": MODEL, "messages": [{"role":"user","content": words}], "max_tokens": 2});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let after = gauge(&support::metrics_text(&gw.url).await).unwrap_or(0.0);
    // Each of the 300 new pieces costs at least its map entry (64 bytes estimated).
    assert!(
        after - before >= 300.0 * 64.0,
        "cache grew {before} -> {after} bytes on 300 new words"
    );
}
