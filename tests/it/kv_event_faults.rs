//! KV-event faults (issue 15): a publisher restart, lost batches (repaired by replay, or stale +
//! fallback) and an unreachable endpoint never fail a client request. Publisher: SGLang's own
//! `ZmqEventPublisher` (`kv_events`' helpers).

use serde_json::json;

use crate::kv_events::{
    blocks, fleet_with_publisher, generate, metric, prompt, received, wait_subscribed, Publisher,
};
use crate::support;

#[tokio::test]
async fn a_restarted_publisher_replaces_the_view() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let (mut first, port, replay) = Publisher::start_free(&py, true);
    let (_a, b, gw) = fleet_with_publisher(port, replay, &[]).await;
    wait_subscribed(&gw).await;
    first.store(&[prompt(1, 100), prompt(2, 100)]);
    support::eventually("12 blocks", || async { blocks(&gw, &b).await == 12.0 }).await;
    drop(first);
    // The new engine starts empty and at seq 0; its first batch may go out before the gateway
    // reconnects (the replay buffer has it).
    let mut second = Publisher::start(&py, port, replay);
    second.store(&[prompt(3, 100)]);
    support::eventually("only the new publisher's blocks", || async {
        blocks(&gw, &b).await == 6.0
            && metric(&gw, "switchboard_kv_event_publisher_restarts_total").await >= 1.0
    })
    .await;
    generate(&gw, &prompt(3, 100)).await;
    assert!(received(&b, &prompt(3, 100)).await);
}

#[tokio::test]
async fn lost_batches_are_replayed_or_the_view_falls_back() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let (mut publisher, port, replay) = Publisher::start_free(&py, true);
    let (_a, b, gw) =
        fleet_with_publisher(port, replay, &["--kv-events-rebuild-secs", "3600"]).await;
    wait_subscribed(&gw).await;
    publisher.store(&[prompt(1, 100)]);
    support::eventually("6 blocks", || async { blocks(&gw, &b).await == 6.0 }).await;
    // Lost on the way but still buffered: the next batch shows the gap, the replay repairs it.
    publisher.cmd(json!({"op": "lose", "prompts": [prompt(2, 100)]}));
    publisher.store(&[prompt(3, 100)]);
    support::eventually("repaired", || async {
        blocks(&gw, &b).await == 18.0
            && metric(
                &gw,
                "switchboard_kv_event_replays_total{outcome=\"repaired\"}",
            )
            .await
                == 1.0
    })
    .await;
    generate(&gw, &prompt(2, 100)).await;
    assert!(
        received(&b, &prompt(2, 100)).await,
        "the replayed blocks route"
    );
    // Lost outright: the view is cleared and b is routed on the approximate index meanwhile.
    publisher.cmd(json!({"op": "skip", "n": 2}));
    publisher.store(&[prompt(4, 100)]);
    support::eventually("stale", || async {
        metric(&gw, "switchboard_kv_events_stale_workers").await == 1.0
    })
    .await;
    assert_eq!(
        metric(
            &gw,
            "switchboard_kv_event_replays_total{outcome=\"incomplete\"}"
        )
        .await,
        1.0
    );
    for i in 0..6 {
        generate(&gw, &prompt(20 + i, 100)).await;
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_costs_no_request() {
    let port = support::free_port();
    let (_a, _b, gw) = fleet_with_publisher(port, None, &[]).await;
    support::eventually("b counted stale", || async {
        metric(&gw, "switchboard_kv_events_stale_workers").await == 1.0
    })
    .await;
    for i in 0..6 {
        generate(&gw, &prompt(i, 100)).await;
    }
}
