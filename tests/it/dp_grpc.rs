//! Data-parallel `grpc://` workers (issue 16): the gateway learns `dp_size` from `GetServerInfo`
//! and routes such a worker per rank, as an HTTP one: the rank pinned in
//! `GenerateRequest.data_parallel_rank`, each rank's `GetLoads` entry on its unit, each rank's
//! `SubscribeKvEvents` batches in its unit's view. The sim honours the pin, reports per rank and
//! relays every rank's publisher, as SGLang's servicer does.

use std::collections::{BTreeSet, HashMap};

use serde_json::json;

use crate::support::sim_request_log;
use crate::support::{self, Proc};

fn prompt(seed: u32, n: u32) -> Vec<u32> {
    (0..n).map(|t| 100 + seed * 500 + t).collect()
}

/// `/generate` through the gateway (a gRPC worker gets it as `Generate`).
async fn generate(gw: &Proc, ids: &[u32]) {
    let r = support::post(
        format!("{}/generate", gw.url),
        &json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

/// Waits until every rank's last load report, as the gateway holds it, shows nothing running
/// or queued.
async fn idle_reports(gw: &Proc) {
    support::eventually("every rank reported idle", || async {
        let w = support::workers(&gw.url).await;
        w["workers"][0]["dp_ranks"].as_array().is_some_and(|ranks| {
            ranks.iter().all(|r| {
                let load = &r["engine_load"];
                load["running_requests"] == 0 && load["waiting_uncached_tokens"] == 0
            })
        })
    })
    .await;
}

/// Waits until the gateway is ready and routes the one worker as four rank units.
async fn four_ranks(gw: &Proc) {
    support::ready(gw).await;
    support::eventually("the worker's four ranks", || async {
        support::workers(&gw.url).await["workers"][0]["dp_ranks"]
            .as_array()
            .is_some_and(|r| r.len() == 4)
    })
    .await;
}

#[tokio::test]
async fn a_grpc_dp_worker_is_routed_per_rank_and_reports_per_rank() {
    let sim = support::grpc_sim(&["--dp-size", "4"]).await;
    let gw = support::gateway(&[&sim], &["--load-poll-interval-ms", "50"]).await;
    four_ranks(&gw).await;
    // Four prefixes, three rounds: each prefix pinned to one rank, every request pinned.
    for round in 0..3 {
        for group in 0..4u32 {
            let mut ids = prompt(group, 400);
            ids.extend([9000 + round, 9100 + round]);
            generate(&gw, &ids).await;
            // The next request is routed on the ranks' reports of none running or queued: one
            // that still shows this request (a cold prompt's 402 uncached tokens queued, and
            // running) would outweigh the next prompt's cached prefix there. On one busy core
            // such a report sometimes came back just after the request ended.
            idle_reports(&gw).await;
        }
    }
    let log = sim_request_log(sim.http_url()).await;
    assert_eq!(log.len(), 12);
    let mut by_group: HashMap<u64, BTreeSet<Option<u64>>> = HashMap::new();
    for r in &log {
        assert_eq!(r["route"], "grpc Generate");
        let head = r["input_ids"][0].as_u64().unwrap();
        by_group
            .entry(head)
            .or_default()
            .insert(r["dp_rank"].as_u64());
    }
    for (head, ranks) in by_group {
        assert_eq!(ranks.len(), 1, "prefix {head} went to ranks {ranks:?}");
        assert!(
            ranks.first().copied().flatten().is_some_and(|r| r < 4),
            "no rank pinned: {ranks:?}"
        );
    }
    // A long request straight to rank 1 (the side port's `/generate`): its `GetLoads` entry
    // reaches rank 1's unit only.
    let body = json!({"input_ids": prompt(7, 32), "routed_dp_rank": 1,
                      "sampling_params": {"max_new_tokens": 4000, "ignore_eos": true}});
    let url = format!("{}/generate", sim.http_url());
    let busy = tokio::spawn(async move { support::post(url, &body).await });
    support::eventually("rank 1's running request seen by its unit", || async {
        let w = support::workers(&gw.url).await;
        let dp = &w["workers"][0]["dp_ranks"];
        dp[1]["engine_load"]["running_requests"] == 1
            && dp[0]["engine_load"]["running_requests"] == 0
    })
    .await;
    busy.abort();
}

#[tokio::test]
async fn each_grpc_ranks_kv_events_steer_its_prefixes_to_that_rank() {
    let sim = crate::dp::four_ranks_publishing(true).await;
    let gw = support::gateway(&[&sim], &[]).await;
    four_ranks(&gw).await;
    support::eventually("subscribed", || async {
        gw.logs().contains("kv events: subscribed")
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Prompts cached on chosen ranks behind the gateway's back: only the events tell where.
    let hot = [
        (prompt(10, 100), 3u64),
        (prompt(11, 100), 2),
        (prompt(12, 100), 1),
    ];
    for (p, rank) in &hot {
        let body = json!({"input_ids": p, "routed_dp_rank": rank,
                          "sampling_params": {"max_new_tokens": 2}});
        let r = support::post(format!("{}/generate", sim.http_url()), &body).await;
        assert_eq!(r.status(), 200);
    }
    support::eventually("the ranks' blocks indexed", || async {
        let text = support::metrics_text(&gw.url).await;
        support::metric_sum(&text, "switchboard_kv_index_blocks") >= 18.0
    })
    .await;
    for (p, rank) in &hot {
        generate(&gw, p).await;
        let log = sim_request_log(sim.http_url()).await;
        assert_eq!(
            log.last().unwrap()["dp_rank"],
            *rank,
            "a prompt rank {rank} holds went elsewhere"
        );
    }
}
