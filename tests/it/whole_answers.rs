//! A client that waits for the whole answer: the worker is asked to stream it in chunks of
//! `WHOLE_ANSWER_STREAM_INTERVAL` tokens (its first token at once), not one chunk per token, and
//! every guarantee of a stream still holds at that grain (here: a migration mid-answer). With
//! `--whole-answers at-once` the worker sends it in one response instead; by default (`auto`)
//! only an answer that fits in the first token and one chunk comes so.

use serde_json::{json, Value};

use crate::support::pd::{decode_sim, pd_gateway, prefill_sim};
use crate::support::{self, sim_request_log, Proc, MODEL};
use switchboard::relay::generation::WHOLE_ANSWER_STREAM_INTERVAL;

/// The `sampling_params` the worker got for each request, in arrival order.
async fn sampling_params(sim: &Proc) -> Vec<Value> {
    sim_request_log(&sim.url)
        .await
        .into_iter()
        .filter(|r| r["route"] == "/generate")
        .map(|r| r["sampling_params"].clone())
        .collect()
}

fn chat(stream: bool, n: u32, stop: &[&str]) -> Value {
    json!({"model": MODEL, "max_tokens": 4, "stream": stream, "n": n, "stop": stop,
           "messages": [{"role": "user", "content": "hello"}]})
}

/// How many chat requests a gateway's `/metrics` (`text`) timed: to the first token, and per
/// output token (only those whose tokens came in more than one chunk).
fn timed(text: &str) -> [f64; 2] {
    [
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
    ]
    .map(|n| support::metric_sum(text, &format!("switchboard_{n}_count{{endpoint=\"chat\"")))
}

/// A gateway with `--whole-answers at-once` and one with `chunked`, both before `sim`, and
/// each one's answer to `body` (a 200 with 8 completion tokens), at once first.
async fn at_once_and_chunked(sim: &Proc, body: &Value) -> (Proc, Proc, Vec<Value>) {
    let at_once = support::gateway(&[sim], &["--whole-answers", "at-once"]).await;
    let chunked = support::gateway(&[sim], &["--whole-answers", "chunked"]).await;
    let mut answers = Vec::new();
    for gw in [&at_once, &chunked] {
        let r = support::post(format!("{}/v1/chat/completions", gw.url), body).await;
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["usage"]["completion_tokens"], 8, "{v}");
        answers.push(v);
    }
    (at_once, chunked, answers)
}

/// Two workers; the first dies after its 40th token of every generation (a chunked answer's
/// first chunk is token 1, its second token 33).
async fn a_dying_and_a_healthy_worker() -> (Proc, Proc) {
    let dying = support::sim(&["--time-scale", "0.01"]).await;
    let healthy = support::sim(&["--time-scale", "0.01"]).await;
    support::set_faults(&dying, json!({"die_after_tokens": 40})).await;
    (dying, healthy)
}

#[tokio::test]
async fn a_whole_answer_is_asked_of_the_worker_in_chunks_a_stream_per_token() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &["--whole-answers", "chunked"]).await;
    let cases = [
        chat(false, 1, &[]),
        chat(false, 2, &[]),
        chat(true, 1, &[]),
        chat(false, 1, &["never"]),
    ];
    for body in cases {
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let _ = r.text().await;
    }
    let intervals: Vec<Value> = sampling_params(&sim)
        .await
        .iter()
        .map(|p| p["stream_interval"].clone())
        .collect();
    let k = json!(WHOLE_ANSWER_STREAM_INTERVAL);
    // One whole answer, two choices of another; then a stream, and a whole answer with a stop
    // string the gateway may have to apply itself: the worker's default interval, every token.
    assert_eq!(
        intervals,
        vec![k.clone(), k.clone(), k, Value::Null, Value::Null]
    );
}

#[tokio::test]
async fn a_whole_answer_whose_worker_dies_continues_from_its_last_chunk() {
    // Past the first chunk (token 1) and the second (token 33), before the third.
    let (dying, healthy) = a_dying_and_a_healthy_worker().await;
    let gw = support::gateway(&[&dying, &healthy], &["--policy", "round_robin"]).await;
    let body = json!({"model": MODEL, "max_tokens": 100, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "a long answer please"}]});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 100, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let metrics = support::metrics_text(&gw.url).await;
    assert_eq!(
        support::metric(
            &metrics,
            r#"switchboard_migrations_total{outcome="continued"}"#
        ),
        Some(1.0)
    );
    // The continuation's prompt holds the 40 ids relayed before the worker died.
    let continued: Vec<Value> = sim_request_log(&healthy.url)
        .await
        .into_iter()
        .filter(|r| r["rid"].as_str().is_some_and(|rid| rid.ends_with("-m1")))
        .collect();
    assert_eq!(continued.len(), 1, "{continued:?}");
    assert_eq!(continued[0]["max_new_tokens"], 60, "{}", continued[0]);
}

/// `--whole-answers at-once`: the worker sends a whole answer in one response. What the
/// gateway records shows it: the first token came with the last (the time to first token is
/// the whole answer's, and no decoding was timed), while a stream, or a request with stop
/// strings, is still streamed.
#[tokio::test]
async fn at_once_a_whole_answer_comes_in_one_response_and_streams_still_stream() {
    // 4 ms a decode step: eight tokens take ~30 ms after the first.
    let sim = support::sim(&["--decode-base-us", "4000"]).await;
    let body = json!({"model": MODEL, "max_tokens": 8, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "hello"}]});
    let (at_once, chunked, answers) = at_once_and_chunked(&sim, &body).await;
    for v in &answers {
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    }
    let content = |v: &Value| v["choices"][0]["message"]["content"].clone();
    assert_eq!(
        content(&answers[0]),
        content(&answers[1]),
        "the same prompt, the same answer"
    );

    let sum = |text: &str, name: &str| {
        support::metric_sum(text, &format!("switchboard_{name}_sum{{endpoint=\"chat\""))
    };
    let text = support::metrics_text(&at_once.url).await;
    assert_eq!(timed(&text), [1.0, 0.0], "{text}");
    let (ttft, e2e) = (
        sum(&text, "time_to_first_token_seconds"),
        sum(&text, "e2e_request_latency_seconds"),
    );
    assert!(ttft >= 0.9 * e2e, "at once: TTFT {ttft} of E2E {e2e}");
    let text = support::metrics_text(&chunked.url).await;
    assert_eq!(timed(&text), [1.0, 1.0], "chunked: {text}");

    assert_eq!(
        support::stream_chat(&at_once.url, "a stream".into()).await,
        Ok(200)
    );
    let text = support::metrics_text(&at_once.url).await;
    assert_eq!(
        timed(&text),
        [2.0, 1.0],
        "a stream is timed per chunk: {text}"
    );

    // Stop strings may be the gateway's to apply (a worker that sends ids only): such a request
    // is streamed token by token as before, and timed per chunk.
    let mut with_stop = body.clone();
    with_stop["stop"] = json!(["never said"]);
    let r = support::post(format!("{}/v1/chat/completions", at_once.url), &with_stop).await;
    assert_eq!(r.status().as_u16(), 200);
    let _ = r.text().await;
    let text = support::metrics_text(&at_once.url).await;
    assert_eq!(timed(&text), [3.0, 2.0], "stop strings: streamed: {text}");
}

/// By default (`auto`) a whole answer comes at once when it fits in the first token and one
/// chunk after it (33 tokens at most), in chunks when it may be longer (or has stop strings);
/// what the gateway timed shows which (per output token only when it came in chunks).
#[tokio::test]
async fn by_default_an_answer_of_one_chunk_after_its_first_token_comes_at_once() {
    // 1 ms a decode step: every chunk's tokens take time, so chunks are timed per token.
    let sim = support::sim(&["--decode-base-us", "1000"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let longest = 1 + WHOLE_ANSWER_STREAM_INTERVAL;
    let ask = |max_tokens: u32, stop: &[&str]| {
        json!({"model": MODEL, "max_tokens": max_tokens, "ignore_eos": true, "stop": stop,
               "messages": [{"role": "user", "content": "how long?"}]})
    };
    // [requests timed to the first token, of them per output token] after each request.
    let cases = [
        (ask(1, &[]), [1.0, 0.0]),
        (ask(longest, &[]), [2.0, 0.0]),
        (ask(longest + 1, &[]), [3.0, 1.0]),
        (ask(8, &["never said"]), [4.0, 2.0]),
    ];
    for (body, expected) in cases {
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["usage"]["completion_tokens"], body["max_tokens"], "{v}");
        let text = support::metrics_text(&gw.url).await;
        assert_eq!(timed(&text), expected, "after {body}: {text}");
    }
}

/// At once, the wait is as long as the answer's chunks could have taken together: the
/// first-token limit and one idle gap for an answer of one chunk after its first token. A
/// worker that sends nothing for 3 s is cut at 2 s under 1 s + 1 s, not at the first-token
/// limit's 1 s, and answers in time under 1 s + 3 s.
#[tokio::test]
async fn at_once_a_short_answer_waits_the_first_token_limit_and_one_idle_gap() {
    let (cut_sim, kept_sim) = (
        support::sim(&["--time-scale", "0.01"]).await,
        support::sim(&["--time-scale", "0.01"]).await,
    );
    for sim in [&cut_sim, &kept_sim] {
        support::set_faults(sim, json!({"stall_secs": 3.0, "stall_after_tokens": 0})).await;
    }
    let limits = |idle: &'static str| {
        [
            "--ttft-timeout-secs",
            "1",
            "--stream-idle-timeout-secs",
            idle,
        ]
    };
    let cut = support::gateway(&[&cut_sim], &limits("1")).await;
    let kept = support::gateway(&[&kept_sim], &limits("3")).await;
    let body = json!({"model": MODEL, "max_tokens": 8, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "a slow worker"}]});
    let ask = |gw: &Proc| {
        let (url, body) = (format!("{}/v1/chat/completions", gw.url), body.clone());
        async move {
            let t = std::time::Instant::now();
            let r = support::post(url, &body).await;
            let status = r.status().as_u16();
            let v: Value = r.json().await.expect("json");
            (status, v, t.elapsed())
        }
    };
    let ((cut_status, cut_v, cut_took), (kept_status, kept_v, _)) =
        tokio::join!(ask(&cut), ask(&kept));
    assert_eq!(cut_status, 504, "{cut_v}");
    assert_eq!(cut_v["error"]["code"], "upstream_timeout", "{cut_v}");
    assert!(
        cut_took >= std::time::Duration::from_millis(1900),
        "cut before its second limit: {cut_took:?}"
    );
    support::sim_aborted_and_idle(&cut_sim.url).await;
    assert_eq!(kept_status, 200, "{kept_v}");
    assert_eq!(kept_v["usage"]["completion_tokens"], 8, "{kept_v}");
}

/// At once, the first token is the last: the time-to-first-token limit would cut every answer
/// longer than it short, so the wait adds an idle gap per chunk it would have come in.
#[tokio::test]
async fn at_once_an_answer_longer_than_the_first_token_limit_is_not_cut() {
    // 30 tokens at 50 ms: ~1.5 s, past a 1 s limit on the first token.
    let sim = support::sim(&["--decode-base-us", "50000"]).await;
    let gw = support::gateway(
        &[&sim],
        &["--whole-answers", "at-once", "--ttft-timeout-secs", "1"],
    )
    .await;
    let body = json!({"model": MODEL, "max_tokens": 30, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "take your time"}]});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 30, "{v}");
}

/// At once, a worker that dies mid-answer has sent nothing the client saw: the generation is
/// started over on another worker (not continued: no ids came back), and the client gets it.
#[tokio::test]
async fn at_once_an_answer_whose_worker_dies_is_started_over_elsewhere() {
    let (dying, healthy) = a_dying_and_a_healthy_worker().await;
    let gw = support::gateway(
        &[&dying, &healthy],
        &["--policy", "round_robin", "--whole-answers", "at-once"],
    )
    .await;
    let body = json!({"model": MODEL, "max_tokens": 100, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "a long answer please"}]});
    for _ in 0..2 {
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["usage"]["completion_tokens"], 100, "{v}");
    }
    // The healthy worker ran both, each from the prompt alone with the whole budget.
    let runs: Vec<Value> = sim_request_log(&healthy.url)
        .await
        .into_iter()
        .filter(|r| r["route"] == "/generate")
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in &runs {
        assert_eq!(run["max_new_tokens"], 100, "{run}");
    }
    // Each time the dying worker broke off before any answer: a retry, as for any request it
    // may not have run, and no continuation.
    let died = sim_request_log(&dying.url)
        .await
        .iter()
        .filter(|r| r["route"] == "/generate")
        .count();
    assert!(died >= 1, "round robin never reached the dying worker");
    let metrics = support::metrics_text(&gw.url).await;
    assert_eq!(
        support::metric_sum(&metrics, "switchboard_retries_total"),
        died as f64,
        "{metrics}"
    );
    assert_eq!(
        support::metric_sum(&metrics, "switchboard_migrations_total"),
        0.0,
        "{metrics}"
    );
}

/// At once, a gRPC worker (`smg-grpc-servicer`'s `Generate` without `stream`) sends one
/// `complete` holding every output id: the same answer, timed as one chunk.
#[tokio::test]
async fn at_once_a_grpc_worker_sends_one_complete_message() {
    let sim = support::grpc_sim(&["--decode-base-us", "4000"]).await;
    let body = json!({"model": MODEL, "max_tokens": 8, "ignore_eos": true,
                      "logprobs": true, "top_logprobs": 2,
                      "messages": [{"role": "user", "content": "hello over grpc"}]});
    let (at_once, chunked, replies) = at_once_and_chunked(&sim, &body).await;
    let mut answers = Vec::new();
    for (gw, v) in [&at_once, &chunked].into_iter().zip(&replies) {
        let choice = &v["choices"][0];
        assert_eq!(
            choice["logprobs"]["content"].as_array().map(Vec::len),
            Some(8),
            "{v}"
        );
        answers.push(choice["message"]["content"].clone());
        let [_, tpot] = timed(&support::metrics_text(&gw.url).await);
        answers.push(json!(tpot));
    }
    // The same text; timed per chunk only when it came in chunks.
    assert_eq!(answers[0], answers[2], "{answers:?}");
    assert_eq!((&answers[1], &answers[3]), (&json!(0.0), &json!(1.0)));
}

/// `--whole-answers at-once` before a PD pair: both workers get the pair's one request with
/// `stream: false` (the prefill worker's answer, one token, is read as one JSON object), and the
/// client's answer comes in one response from the decode worker: the same text as through a
/// chunked pair, with no decoding timed.
#[tokio::test]
async fn at_once_a_pd_pair_answers_in_one_response() {
    let p = prefill_sim(&[]).await;
    let d = decode_sim(&["--decode-base-us", "4000"]).await;
    let at_once = pd_gateway(&[&p], &[&d], &["--whole-answers", "at-once"]).await;
    let chunked = pd_gateway(&[&p], &[&d], &["--whole-answers", "chunked"]).await;
    let body = json!({"model": MODEL, "max_tokens": 6, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "a pair, at once"}]});
    let mut contents = Vec::new();
    for gw in [&at_once, &chunked] {
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["usage"]["completion_tokens"], 6, "{v}");
        contents.push(v["choices"][0]["message"]["content"].clone());
    }
    assert_eq!(contents[0], contents[1]);
    assert_eq!(
        timed(&support::metrics_text(&at_once.url).await),
        [1.0, 0.0]
    );
    assert_eq!(
        timed(&support::metrics_text(&chunked.url).await),
        [1.0, 1.0]
    );
}
