//! `grpc://` workers as a fleet: health over gRPC (a stopped worker, a servicer answering
//! NOT_SERVING) and a worker added at run time, with its `GetLoads`.

use serde_json::json;

use crate::grpc_workers::{chat, sim_requests, stream_chat, FAST};
use crate::support;

#[tokio::test]
async fn a_stopped_grpc_worker_is_excluded_by_its_health_check() {
    let (mut a, b) = (support::grpc_sim(FAST).await, support::grpc_sim(FAST).await);
    let gw = support::gateway(&[&a, &b], &[]).await;
    a.kill();
    // Connection refused on `a` is "never started": every request completes on `b`.
    for i in 0..4 {
        let (status, _, _, done, _) = stream_chat(&gw, &chat(&format!("k{i}"), 4, true)).await;
        assert_eq!((status, done), (200, true), "request {i}");
    }
    support::eventually("the stopped worker excluded", || async {
        let m = support::metrics_text(&gw.url).await;
        support::metric_sum(&m, "switchboard_worker_healthy") == 1.0
    })
    .await;
}

#[tokio::test]
async fn a_grpc_worker_added_at_run_time_serves_and_reports_its_load() {
    let a = support::grpc_sim(&["--decode-base-us", "20000"]).await;
    let gw = support::gateway(&[], &["--load-poll-interval-ms", "50"]).await;
    let r = support::post(format!("{}/workers", gw.url), &json!({"url": a.url})).await;
    assert_eq!(r.status().as_u16(), 201);
    support::ready(&gw).await;
    // A long generation keeps the engine busy: its GetLoads shows it running.
    let mut long = support::post(
        format!("{}/v1/chat/completions", gw.url),
        &chat("busy", 500, true),
    )
    .await;
    long.chunk().await.expect("a first chunk");
    support::eventually("GetLoads reports the running request", || async {
        let v = support::workers(&gw.url).await;
        let w = &v["workers"][0];
        w["engine_load"]["running_requests"] == 1
            && w["engine_load_sources"]["running_requests"] == "grpc_get_loads"
    })
    .await;
}

/// Health over `grpc.health.v1` (SGLang's servicer registers it): a servicer warming up or
/// draining answers NOT_SERVING for the scheduler's service while its `HealthCheck` probe still
/// passes; the gateway routes nothing there until it serves again.
#[tokio::test]
async fn a_not_serving_grpc_worker_gets_no_requests() {
    let (a, b) = (support::grpc_sim(FAST).await, support::grpc_sim(FAST).await);
    let gw = support::gateway(&[&a, &b], &["--policy", "round_robin"]).await;
    let healthy = |n: f64| {
        let url = gw.url.clone();
        async move {
            let m = support::metrics_text(&url).await;
            support::metric_sum(&m, "switchboard_worker_healthy") == n
        }
    };
    support::set_faults(&a, json!({"grpc_not_serving": true})).await;
    support::eventually("the NOT_SERVING worker excluded", || healthy(1.0)).await;
    let before = sim_requests(&a).await;
    for i in 0..4 {
        let (status, _, _, done, _) = stream_chat(&gw, &chat(&format!("n{i}"), 4, true)).await;
        assert_eq!((status, done), (200, true), "request {i}");
    }
    assert_eq!(
        sim_requests(&a).await,
        before,
        "a NOT_SERVING worker got requests"
    );
    support::set_faults(&a, json!({"grpc_not_serving": false})).await;
    support::eventually("serving again", || healthy(2.0)).await;
}
