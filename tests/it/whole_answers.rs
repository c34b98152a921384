//! A client that waits for the whole answer: the worker is asked to stream it in chunks of
//! `WHOLE_ANSWER_STREAM_INTERVAL` tokens (its first token at once), not one chunk per token, and
//! every guarantee of a stream still holds at that grain (here: a migration mid-answer).

use serde_json::{json, Value};

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

#[tokio::test]
async fn a_whole_answer_is_asked_of_the_worker_in_chunks_a_stream_per_token() {
    let sim = support::sim(&["--zero-latency"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
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
    let dying = support::sim(&["--time-scale", "0.01"]).await;
    let healthy = support::sim(&["--time-scale", "0.01"]).await;
    // Past the first chunk (token 1) and the second (token 33), before the third.
    let r = support::post(
        format!("{}/sim/faults", dying.url),
        &json!({"die_after_tokens": 40}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
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
