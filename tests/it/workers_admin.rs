//! The worker registry at run time: admin routes, their keys, and membership changes under load.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;

use crate::support::MODEL;
use serde_json::json;

/// `DELETE /workers/{id}` for the worker registered at `url`.
async fn remove(gw: &str, url: &str) {
    let list = support::workers(gw).await;
    let id = list["workers"]
        .as_array()
        .expect("list")
        .iter()
        .find(|w| w["url"] == url)
        .expect("worker listed")["id"]
        .as_u64()
        .expect("id");
    let r = support::client()
        .delete(format!("{gw}/workers/{id}"))
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status().as_u16(), 204);
}

async fn picks(gw: &str, worker: &str) -> f64 {
    let text = support::client()
        .get(format!("{gw}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .filter(|l| {
            l.starts_with("switchboard_route_picks_total")
                && l.contains(&format!("worker=\"{worker}\""))
        })
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum::<f64>()
}

#[tokio::test]
async fn removing_and_adding_workers_under_load_fails_nothing() {
    let a = support::sim(&["--time-scale", "0.05"]).await;
    let b = support::sim(&["--time-scale", "0.05"]).await;
    let c = support::sim(&["--time-scale", "0.05"]).await;
    let gw = support::gateway(&[&a, &b], &["--policy", "round_robin"]).await;
    let url = gw.url.clone();
    let load = tokio::spawn(async move {
        let mut results = Vec::new();
        for round in 0..20 {
            let batch: Vec<_> = (0..8)
                .map(|i| support::stream_chat(&url, format!("q{}", round * 8 + i)))
                .collect();
            results.extend(futures_util::future::join_all(batch).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        results
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Remove b while requests are in flight on it.
    remove(&gw.url, &b.url).await;
    // Add c: it must take traffic within one health interval (1 s here).
    let added = Instant::now();
    let r = support::client()
        .post(format!("{}/workers", gw.url))
        .json(&json!({"url": c.url}))
        .send()
        .await
        .expect("add");
    assert_eq!(r.status().as_u16(), 201);
    let results = load.await.expect("load task");
    let failures: Vec<_> = results.iter().filter(|r| !matches!(r, Ok(200))).collect();
    assert!(
        failures.is_empty(),
        "{} of {} requests failed: {:?}",
        failures.len(),
        results.len(),
        &failures[..failures.len().min(3)]
    );
    assert!(
        picks(&gw.url, &c.url).await > 0.0,
        "the added worker got no traffic"
    );
    assert!(added.elapsed() < Duration::from_secs(30));
    // Duplicates and bad URLs are refused with OpenAI-style errors.
    let r = support::client()
        .post(format!("{}/workers", gw.url))
        .json(&json!({"url": c.url}))
        .send()
        .await
        .expect("dup");
    assert_eq!(r.status().as_u16(), 409);
    let r = support::client()
        .post(format!("{}/workers", gw.url))
        .json(&json!({"url": "file:///etc/passwd"}))
        .send()
        .await
        .expect("bad");
    assert_eq!(r.status().as_u16(), 400);
    let r = support::client()
        .delete(format!("{}/workers/999", gw.url))
        .send()
        .await
        .expect("missing");
    assert_eq!(r.status().as_u16(), 404);
}

#[tokio::test]
async fn a_killed_worker_is_excluded_and_its_streams_end_with_an_error() {
    let a = support::sim(&["--decode-base-us", "20000"]).await;
    let mut b = support::sim(&["--decode-base-us", "20000"]).await;
    // No migration here: this checks the error path (the reliability tests cover migration).
    let gw = support::gateway(
        &[&a, &b],
        &["--policy", "round_robin", "--migration-limit", "0"],
    )
    .await;
    // Long streams on both workers.
    let body = json!({"model": MODEL, "messages": [{"role":"user","content":"long"}], "max_tokens": 500, "stream": true});
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        r.chunk().await.expect("chunk");
        streams.push(r);
    }
    let killed_at = Instant::now();
    b.kill();
    // The stream that was on b ends promptly with an error event, not a hang and not [DONE].
    let mut errors = 0;
    for mut r in streams {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut text = String::new();
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_millis(500), r.chunk()).await {
                Ok(Ok(Some(c))) => text.push_str(&String::from_utf8_lossy(&c)),
                Ok(Ok(None)) | Ok(Err(_)) => break,
                Err(_) => {
                    if text.is_empty() {
                        continue;
                    }
                    break; // the healthy stream: enough seen
                }
            }
            if text.contains("\"error\"") {
                break;
            }
        }
        if text.contains("\"error\"") {
            assert!(
                !text.contains("[DONE]"),
                "an interrupted stream must not end with [DONE]"
            );
            errors += 1;
        }
    }
    assert_eq!(errors, 1, "exactly the stream on the killed worker fails");
    assert!(killed_at.elapsed() < Duration::from_secs(10));
    // Excluded within one health interval (1 s) plus a probe timeout; then everything goes to a.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = support::workers(&gw.url).await;
        let bw = v["workers"]
            .as_array()
            .expect("list")
            .iter()
            .find(|w| w["url"] == b.url.as_str())
            .cloned()
            .expect("b");
        if bw["available"] == false {
            assert!(bw["excluded_because"].is_string());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "killed worker still available: {bw}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..6 {
        assert_eq!(
            support::stream_chat(&gw.url, format!("q{i}")).await,
            Ok(200)
        );
    }
}

/// The engine's own load (`/v1/loads`) is polled and shown per worker, including requests the
/// gateway did not send.
#[tokio::test]
async fn engine_load_is_polled_from_the_worker() {
    let sim = support::sim(&["--decode-base-us", "20000"]).await;
    let gw = support::gateway(&[&sim], &["--load-poll-interval-ms", "100"]).await;
    let mut direct = support::client()
        .post(format!("{}/generate", sim.url))
        .json(&json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 500}, "stream": true}))
        .send()
        .await
        .expect("direct request");
    direct.chunk().await.expect("first chunk");
    let url = gw.url.clone();
    support::eventually("the gateway sees the worker's running request", || {
        let url = url.clone();
        async move {
            let v = support::workers(&url).await;
            v["workers"][0]["engine_load"]["running_requests"] == 1
        }
    })
    .await;
}

/// Load polls run concurrently (issue 14, defect 11): twenty workers that stall their load
/// reports do not hold up a healthy worker's figure. Polled one after another, each round waited
/// 20 × the poll timeout (250 ms) before reaching the healthy worker.
#[tokio::test]
async fn workers_that_stall_their_load_reports_do_not_delay_the_others() {
    let polls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&polls);
    // Reports as many running requests as it was polled: its figure shows each refresh.
    let healthy = support::fake_worker(axum::Router::new().route(
        "/v1/loads",
        get(move || {
            let n = counted.fetch_add(1, Ordering::Relaxed) + 1;
            async move { axum::Json(json!({"loads": [{"num_running_reqs": n}]})) }
        }),
    ))
    .await;
    let mut urls = Vec::new();
    for _ in 0..20 {
        // Answers its first poll, so the gateway keeps asking it, then never again.
        let answered = Arc::new(AtomicBool::new(false));
        let stalling = get(move || {
            let first = !answered.swap(true, Ordering::Relaxed);
            async move {
                if !first {
                    std::future::pending::<()>().await;
                }
                axum::Json(json!({"loads": []}))
            }
        });
        urls.push(support::fake_worker(axum::Router::new().route("/v1/loads", stalling)).await);
    }
    // Last, so that a sequential round reaches it after all the stalled ones.
    urls.push(healthy.clone());
    let mut args = vec!["--load-poll-interval-ms", "250", "--worker-urls"];
    args.extend(urls.iter().map(String::as_str));
    let gw = support::gateway(&[], &args).await;
    support::ready(&gw).await;
    support::eventually("the healthy worker's load refreshed 12 times", || {
        let (url, healthy) = (gw.url.clone(), healthy.clone());
        async move {
            let v = support::workers(&url).await;
            v["workers"].as_array().into_iter().flatten().any(|w| {
                w["url"] == healthy.as_str()
                    && w["engine_load"]["running_requests"].as_u64() >= Some(12)
            })
        }
    })
    .await;
}

#[tokio::test]
async fn a_removed_workers_metric_series_go_with_it() {
    let a = support::sim(&["--time-scale", "0.01"]).await;
    let b = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&a, &b], &["--policy", "round_robin"]).await;
    for i in 0..4 {
        assert_eq!(
            support::stream_chat(&gw.url, format!("m{i}")).await,
            Ok(200)
        );
    }
    let series = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains(&format!("worker=\"{}\"", b.url)))
            .count()
    };
    assert!(
        series(&support::metrics_text(&gw.url).await) > 0,
        "b has series while registered"
    );
    remove(&gw.url, &b.url).await;
    let text = support::metrics_text(&gw.url).await;
    assert_eq!(series(&text), 0, "no series left for the removed worker");
    assert!(
        text.contains(&format!("worker=\"{}\"", a.url)),
        "a's series stay"
    );
}
