//! What the gateway asks workers when no client is asking anything (health, loads), and the
//! simulator's one-process fleet (`sim --ports`) that fleet-scale runs use.

use std::time::Duration;

use serde_json::json;

use crate::support::{self, post, sim_request_log, MODEL};

/// The background requests a sim received so far, per path (`GET /sim/background`).
async fn background(sim_url: &str) -> serde_json::Value {
    support::get_json(&format!("{sim_url}/sim/background")).await
}

fn count(counts: &serde_json::Value, path: &str) -> u64 {
    counts[path]
        .as_u64()
        .unwrap_or_else(|| panic!("no {path} in {counts}"))
}

fn total(counts: &serde_json::Value) -> u64 {
    counts
        .as_object()
        .expect("object")
        .values()
        .filter_map(|v| v.as_u64())
        .sum()
}

/// What one sim behind a gateway with this health interval was asked while both stayed idle
/// for `window`: the counts before and after.
async fn idle_for(
    health_interval_secs: &str,
    window: Duration,
) -> (serde_json::Value, serde_json::Value) {
    let sim = support::sim(&[]).await;
    let _gw = support::gateway(
        &[&sim],
        &["--health-check-interval-secs", health_interval_secs],
    )
    .await;
    let before = background(&sim.url).await;
    tokio::time::sleep(window).await;
    (before, background(&sim.url).await)
}

#[tokio::test]
async fn a_fleet_in_one_process_is_independent_workers() {
    let (_fleet, urls) = support::sim_fleet(3, &[]).await;
    assert_eq!(urls.len(), 3);
    let gen = json!({"text": "Hello there", "sampling_params": {"max_new_tokens": 4}});
    let r = post(format!("{}/generate", urls[1]), &gen).await;
    assert_eq!(r.status(), 200);
    assert_eq!(sim_request_log(&urls[1]).await.len(), 1);
    assert!(sim_request_log(&urls[0]).await.is_empty());
    assert!(sim_request_log(&urls[2]).await.is_empty());

    // A gateway in front of the whole fleet spreads requests over all three.
    let mut args = vec!["--policy", "round_robin", "--worker-urls"];
    args.extend(urls.iter().map(String::as_str));
    let gw = support::gateway(&[], &args).await;
    support::wait_ok(&format!("{}/readiness", gw.url)).await;
    for _ in 0..6 {
        let r = post(
            format!("{}/v1/completions", gw.url),
            &json!({"model": MODEL, "prompt": "Hi", "max_tokens": 2}),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    for url in &urls {
        assert!(
            !sim_request_log(url).await.is_empty(),
            "{url} got nothing from the gateway"
        );
    }
}

/// Default settings: an idle worker sees at most one background request a second from a
/// gateway, and polls of unchanged figures slow down.
#[tokio::test]
async fn an_idle_worker_is_asked_at_most_once_a_second() {
    let window = Duration::from_secs(8);
    // The default health interval (the harness would otherwise shorten it).
    let (before, after) = idle_for("5", window).await;
    let asked = total(&after) - total(&before);
    assert!(
        asked <= window.as_secs(),
        "{asked} background requests in {window:?}: {before} → {after}"
    );
    // Unchanged figures: polled after 1, 2, 4, 8 s rather than every second.
    let loads = count(&after, "/v1/loads") - count(&before, "/v1/loads");
    assert!(
        loads <= 5,
        "{loads} load polls of an idle worker in {window:?}"
    );
    assert!(loads >= 1, "the idle worker was never polled");
}

/// A worker that serves traffic is not also asked `/health`: its first tokens show it works.
/// It is polled for its load at the base rate while the gateway has work on it.
#[tokio::test]
async fn a_busy_worker_is_not_also_health_checked() {
    let sim = support::sim(&["--decode-base-us", "2000"]).await;
    let gw = support::gateway(&[&sim], &["--health-check-interval-secs", "1"]).await;
    let before = background(&sim.url).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(6);
    let mut served = 0;
    while tokio::time::Instant::now() < until {
        let r = post(
            format!("{}/v1/completions", gw.url),
            &json!({"model": MODEL, "prompt": "Hi", "max_tokens": 50, "ignore_eos": true}),
        )
        .await;
        assert_eq!(r.status(), 200);
        served += 1;
    }
    let after = background(&sim.url).await;
    let health = count(&after, "/health") - count(&before, "/health");
    assert!(
        health <= 2,
        "{health} health probes in 6 s of traffic ({served} requests): {before} → {after}"
    );
    let loads = count(&after, "/v1/loads") - count(&before, "/v1/loads");
    assert!(loads >= 3, "a busy worker polled {loads} times in 6 s");
}

/// An idle worker that keeps passing is probed after 1, 2, 4, then every 6 intervals, not at
/// every interval.
#[tokio::test]
async fn an_idle_passing_worker_is_health_checked_less_and_less_often() {
    let window = Duration::from_secs(10);
    let (before, after) = idle_for("1", window).await;
    let health = count(&after, "/health") - count(&before, "/health");
    // Every interval would be 10; the schedule gives 3 or 4 in any 10 s.
    assert!(
        (1..=5).contains(&health),
        "{health} health probes of an idle worker in {window:?}"
    );
}

/// SGLang 0.5.9 keeps waiting tokens out of `/v1/loads`; with nothing waiting there are none,
/// so an idle 0.5.9 worker is not also asked its deprecated `/get_load`.
#[tokio::test]
async fn an_idle_0_5_9_worker_is_not_asked_get_load() {
    let sim = support::sim(&["--sglang-version", "0.5.9"]).await;
    let _gw = support::gateway(&[&sim], &[]).await;
    let before = background(&sim.url).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = background(&sim.url).await;
    let loads = count(&after, "/v1/loads") - count(&before, "/v1/loads");
    assert!(loads >= 1, "the idle worker was never polled");
    assert_eq!(count(&after, "/get_load"), 0, "{before} → {after}");
}
