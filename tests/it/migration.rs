//! A generation moved to another worker (its worker died before or during the stream) keeps its
//! accounting right: the request's prompt counts, the new worker's booked load, the dead
//! worker's failure counted once; and its text is that of one unbroken generation.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::support::{self, scripted, Proc, MODEL};

/// The gateway's view of its workers (`GET /workers`), in registration order.
async fn workers(gw: &Proc) -> Vec<Value> {
    let v = support::workers(&gw.url).await;
    v["workers"].as_array().cloned().expect("a workers list")
}

#[tokio::test]
async fn a_restart_before_the_first_token_reports_the_prompt() {
    let dying = support::sim(&["--time-scale", "0.01"]).await;
    let healthy = support::sim(&["--time-scale", "0.01"]).await;
    support::set_faults(&dying, json!({"die_after_tokens": 0})).await;
    let gw = support::gateway(&[&dying, &healthy], &["--policy", "round_robin"]).await;
    // 40 tokens: more than the first and one chunk, so the worker streams them (a shorter
    // answer comes at once, and a worker dying before it is a retry, not a restart).
    let body = json!({"model": MODEL, "max_tokens": 40, "ignore_eos": true,
                      "messages": [{"role": "user", "content": "count the prompt"}]});
    // Round robin: one of the two lands on the dying worker first and is restarted elsewhere.
    let mut prompts = Vec::new();
    for _ in 0..2 {
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.expect("json");
        prompts.push(v["usage"]["prompt_tokens"].as_u64().unwrap_or(0));
    }
    let text = support::metrics_text(&gw.url).await;
    assert!(
        support::metric_sum(&text, "switchboard_migrations_total") >= 1.0,
        "one request was restarted on the other worker"
    );
    assert!(prompts[0] > 0, "prompt tokens reported: {prompts:?}");
    assert_eq!(
        prompts[0], prompts[1],
        "same prompt, same count: {prompts:?}"
    );
}

/// The only worker dies before its first token: the restart finds nobody, and the client
/// learns what happened (the worker broke off), not "no healthy worker".
#[tokio::test]
async fn a_restart_with_no_worker_left_reports_the_workers_failure() {
    let dying = support::sim(&["--time-scale", "0.01"]).await;
    support::set_faults(&dying, json!({"die_after_tokens": 0})).await;
    let gw = support::gateway(&[&dying], &[]).await;
    let body = json!({"model": MODEL, "max_tokens": 4,
                      "messages": [{"role": "user", "content": "hello"}]});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    let status = r.status().as_u16();
    let v: Value = r.json().await.expect("json");
    assert_eq!(status, 502, "{v}");
    assert_ne!(v["error"]["code"], "no_worker_available", "{v}");
}

#[tokio::test]
async fn a_continued_leg_releases_its_prefill_at_its_first_token() {
    let dying = support::sim(&["--time-scale", "0.01"]).await;
    // Slow decode on the continuing worker, so the stream is still running when we look.
    let slow = support::sim(&["--decode-base-us", "20000"]).await;
    support::set_faults(&dying, json!({"die_after_tokens": 3})).await;
    let gw = support::gateway(&[&dying, &slow], &["--policy", "round_robin"]).await;
    let body = json!({"model": MODEL, "max_tokens": 400, "ignore_eos": true, "stream": true,
                      "messages": [{"role": "user", "content": "a long answer please"}]});
    let mut stream = support::client()
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(stream.status().as_u16(), 200);
    // Past the dead worker's three tokens: the continuation has produced its own.
    let mut chunks = 0;
    while chunks < 12 {
        match stream.chunk().await {
            Ok(Some(c)) => chunks += String::from_utf8_lossy(&c).matches("data: ").count(),
            other => panic!("stream ended early: {other:?}"),
        }
    }
    let now = workers(&gw).await;
    let continuing = &now[1];
    assert_eq!(
        continuing["in_flight"], 1,
        "the continuation runs on the second worker"
    );
    assert_eq!(
        continuing["pending_prefill_tokens"], 0,
        "its prompt is no longer queued prefill once it produced tokens: {continuing}"
    );
    drop(stream);
}

#[tokio::test]
async fn a_failed_migration_counts_the_dead_worker_once() {
    let a = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&a], &[]).await;
    support::set_faults(&a, json!({"die_after_tokens": 3})).await;
    let body = json!({"model": MODEL, "max_tokens": 20, "ignore_eos": true, "stream": true,
                      "messages": [{"role": "user", "content": "z"}]});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    let text = r.text().await.unwrap_or_default();
    assert!(
        text.contains("\"error\"") && !text.contains("[DONE]"),
        "{text}"
    );
    let metrics = support::metrics_text(&gw.url).await;
    assert_eq!(
        support::metric_sum(&metrics, "switchboard_upstream_errors_total"),
        1.0,
        "one worker died once"
    );
    let failed = support::metric(
        &metrics,
        r#"switchboard_migrations_total{outcome="failed"}"#,
    );
    assert_eq!(failed, Some(1.0));
}

/// Streams a chat whose answer is `answer`'s ids, with stop string `stop`: the first worker dies
/// right after the first ids whose decode ends with `cut_after`, another one continues. The
/// workers hold back text as if their stop string were `worker_stop`. Returns the client's
/// joined text and its finish reason.
async fn migrated(
    answer: &str,
    stop: &str,
    worker_stop: &str,
    cut_after: &str,
) -> (String, String) {
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    let ids = tok.encode(answer, false).expect("encode");
    let cut = (1..ids.len())
        .find(|&k| {
            tok.decode(&ids[..k], true)
                .expect("decode")
                .ends_with(cut_after)
        })
        .expect("a cut point");
    let (first, rest) = (ids[..cut].to_vec(), ids[cut..].to_vec());
    let stop_owned = worker_stop.to_owned();
    // The same script on both workers: a first leg dies, a continuation (`…-m1`) runs to the end.
    let reply: scripted::Reply = Arc::new(move |req: &Value| {
        if req["rid"].as_str().is_some_and(|r| r.ends_with("-m1")) {
            scripted::body(
                scripted::cumulative(&tok, &rest, &stop_owned, true),
                scripted::End::Done,
            )
        } else {
            scripted::body(
                scripted::cumulative(&tok, &first, &stop_owned, false),
                scripted::End::Reset,
            )
        }
    });
    let (a, _) = scripted::worker(Arc::clone(&reply)).await;
    let (b, _) = scripted::worker(reply).await;
    let gw = support::gateway(
        &[],
        &["--worker-urls", &a, &b, "--load-poll-interval-ms", "0"],
    )
    .await;
    // Both healthy, so round robin sends the first request to the first one.
    support::all_workers_healthy(&gw.url).await;
    let body = json!({"model": MODEL, "max_tokens": ids.len(), "stream": true, "stop": [stop],
                      "messages": [{"role": "user", "content": "llamas"}]});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("body");
    let (content, done) = support::chat_stream_content(&text);
    assert!(done, "one uninterrupted stream: {text}");
    let finish = support::sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| v["choices"][0]["finish_reason"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (content, finish)
}

#[tokio::test]
async fn text_held_back_when_a_worker_dies_reaches_the_client() {
    // Half a character: the dead worker sent "Hi " and held the emoji's first bytes.
    let answer = "Hi 🦙🦙 there";
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    let whole = tok
        .decode(&tok.encode(answer, false).expect("encode"), true)
        .expect("decode");
    let split_char = migrated(answer, "NEVER", "NEVER", "\u{FFFD}").await;
    // The start of a stop string: the dead worker held "END"; " OF" arrives on the next leg.
    let split_stop = migrated("one two END OF three", "END OF", "END OF", "END").await;
    // A worker that held back more than the gateway would ("two"): it is sent at the switch.
    let held_more = migrated("one two three", "NEVER", "two x", "two").await;
    assert_eq!(
        (split_char, split_stop, held_more),
        (
            (whole, "length".into()),
            ("one two ".into(), "stop".into()),
            ("one two three".into(), "length".into())
        )
    );
}
