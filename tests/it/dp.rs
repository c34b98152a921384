//! Data-parallel workers (`--dp-size N`, issue 16): the sim runs N engines behind one port,
//! honours the rank field its release reads and balances the rest itself; the gateway routes
//! such a worker per rank (the rank named in the request, each rank's own cache and load).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::pd::{decode_sim, pd_gateway, prefill_sim};
use crate::support::sim_request_log;
use crate::support::{self, Proc, MODEL};

/// `/generate` straight to a sim: its status and body.
async fn generate(sim: &Proc, prompt: &[u32], extra: Value) -> (u16, Value) {
    let mut body = json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 2}});
    if let (Some(map), Some(more)) = (body.as_object_mut(), extra.as_object()) {
        map.extend(more.clone());
    }
    let r = support::post(format!("{}/generate", sim.url), &body).await;
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn prompt(seed: u32, n: u32) -> Vec<u32> {
    (0..n).map(|t| 100 + seed * 500 + t).collect()
}

#[tokio::test]
async fn a_dp_sim_has_a_cache_per_rank_and_balances_what_names_no_rank() {
    let sim = support::sim(&[
        "--dp-size",
        "4",
        "--zero-latency",
        "--sglang-version",
        "0.5.23",
    ])
    .await;
    let info = support::get_json(&format!("{}/server_info", sim.url)).await;
    assert_eq!(info["dp_size"], 4);
    assert_eq!(info["load_balance_method"], "round_robin");
    let p = prompt(1, 64);
    // Round robin: the same prompt meets a new rank (and an empty cache) four times.
    for _ in 0..4 {
        let (status, body) = generate(&sim, &p, json!({})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["meta_info"]["cached_tokens"], 0, "{body}");
    }
    let loads = support::get_json(&format!("{}/v1/loads", sim.url)).await;
    assert_eq!(loads["dp_rank_count"], 4);
    let ranks = loads["loads"].as_array().expect("loads");
    assert_eq!(ranks.len(), 4);
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r["dp_rank"], i);
        assert!(r["num_cached_tokens"].as_u64().unwrap() > 0, "{r}");
    }
    // A named rank runs there: a new prompt twice on rank 2 hits its cache the second time.
    let q = prompt(2, 64);
    generate(&sim, &q, json!({"routed_dp_rank": 2})).await;
    let (_, body) = generate(
        &sim,
        &q,
        json!({"data_parallel_rank": 1, "routed_dp_rank": 2}),
    )
    .await;
    assert_eq!(body["meta_info"]["cached_tokens"], 63, "{body}");
    // 0.5.23's front end refuses a rank out of range.
    let (status, body) = generate(&sim, &q, json!({"routed_dp_rank": 4})).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "routed_dp_rank=4 out of range [0, 4)"
    );
}

#[tokio::test]
async fn a_0_5_9_dp_sim_reads_data_parallel_rank_only() {
    let sim = support::sim(&[
        "--dp-size",
        "2",
        "--zero-latency",
        "--sglang-version",
        "0.5.9",
    ])
    .await;
    let q = prompt(3, 64);
    generate(&sim, &q, json!({"data_parallel_rank": 1})).await;
    let (_, body) = generate(&sim, &q, json!({"data_parallel_rank": 1})).await;
    assert_eq!(body["meta_info"]["cached_tokens"], 63, "{body}");
    // 0.5.9 does not know `routed_dp_rank`: the controller's round robin places it.
    let log = sim_request_log(&sim.url).await;
    assert_eq!(log.last().unwrap()["dp_rank"], 1);
    generate(&sim, &q, json!({"routed_dp_rank": 1})).await;
    let log = sim_request_log(&sim.url).await;
    assert_eq!(log.last().unwrap()["dp_rank"], Value::Null);
    let (status, body) = generate(&sim, &q, json!({"data_parallel_rank": 2})).await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "data_parallel_rank must be in range [0, 1]"
    );
}

fn chat(system: &str, question: &str) -> Value {
    json!({"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": question}]})
}

/// A long system prompt per group: what the groups' requests share.
fn system_prompt(group: usize) -> String {
    format!("You are assistant number {group}. ").repeat(40)
}

/// The rank each request named, per group of prompts (told apart by their first ids).
fn ranks_by_group(log: &[Value]) -> HashMap<Vec<u64>, BTreeSet<Option<u64>>> {
    let mut groups: HashMap<Vec<u64>, BTreeSet<Option<u64>>> = HashMap::new();
    for r in log {
        let head: Vec<u64> = r["input_ids"].as_array().unwrap()[..60]
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        groups
            .entry(head)
            .or_default()
            .insert(r["dp_rank"].as_u64());
    }
    groups
}

#[tokio::test]
async fn the_gateway_names_a_rank_and_keeps_a_prefix_on_its_rank() {
    let sim = support::sim(&[
        "--dp-size",
        "4",
        "--zero-latency",
        "--sglang-version",
        "0.5.23",
    ])
    .await;
    let gw = support::gateway(&[&sim], &[]).await;
    for round in 0..3 {
        for group in 0..4 {
            let body = chat(&system_prompt(group), &format!("question {round}"));
            let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
            assert_eq!(r.status().as_u16(), 200);
        }
    }
    // Forwarded bodies (`/generate` passes through) carry the rank too.
    let text = format!("{} and a question", system_prompt(0));
    let body = json!({"text": text, "sampling_params": {"max_new_tokens": 2}});
    let r = support::post(format!("{}/generate", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let log = sim_request_log(&sim.url).await;
    assert_eq!(log.len(), 13);
    for (head, ranks) in ranks_by_group(&log[..12]) {
        assert_eq!(
            ranks.len(),
            1,
            "a prefix went to several ranks: {ranks:?} ({head:?})"
        );
        let rank = ranks.first().copied().flatten();
        assert!(rank.is_some_and(|r| r < 4), "no rank named: {ranks:?}");
    }
    assert!(
        log[12]["dp_rank"].as_u64().is_some_and(|r| r < 4),
        "{}",
        log[12]
    );
    let workers = support::workers(&gw.url).await;
    let dp = workers["workers"][0]["dp_ranks"]
        .as_array()
        .expect("dp_ranks")
        .clone();
    assert_eq!(dp.len(), 4);
    assert_eq!(dp[3]["rank"], 3);
    assert_eq!(dp[3]["rank_field"], "routed_dp_rank");
}

#[tokio::test]
async fn each_ranks_own_load_report_reaches_its_routing_unit() {
    let sim = support::sim(&["--dp-size", "2", "--sglang-version", "0.5.9"]).await;
    let gw = support::gateway(&[&sim], &["--load-poll-interval-ms", "50"]).await;
    // A long request straight to rank 1, which the gateway did not book.
    let body = json!({"input_ids": prompt(4, 32), "data_parallel_rank": 1,
                      "sampling_params": {"max_new_tokens": 4000, "ignore_eos": true}});
    let url = format!("{}/generate", sim.url);
    let busy = tokio::spawn(async move { support::post(url, &body).await });
    support::eventually("rank 1's running request seen by its unit", || async {
        let w = support::workers(&gw.url).await;
        let dp = &w["workers"][0]["dp_ranks"];
        dp[1]["engine_load"]["running_requests"] == 1
            && dp[0]["engine_load"]["running_requests"] == 0
            && dp[1]["rank_field"] == "data_parallel_rank"
    })
    .await;
    busy.abort();
}

#[tokio::test]
async fn a_pd_pair_of_dp_workers_names_each_legs_rank() {
    let p = prefill_sim(&["--dp-size", "2", "--zero-latency"]).await;
    let d = decode_sim(&["--dp-size", "2", "--zero-latency"]).await;
    let gw = pd_gateway(&[&p], &[&d], &[]).await;
    for i in 0..4 {
        let body = chat(&system_prompt(i), "hello");
        let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
        assert_eq!(
            r.status().as_u16(),
            200,
            "{}",
            r.text().await.unwrap_or_default()
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for sim in [&p.sim, &d] {
        let log = sim_request_log(&sim.url).await;
        assert_eq!(log.len(), 4);
        assert!(
            log.iter()
                .all(|r| r["dp_rank"].as_u64().is_some_and(|r| r < 2)),
            "{log:?}"
        );
    }
}

#[tokio::test]
async fn each_ranks_kv_events_steer_its_prefixes_to_that_rank() {
    let sim = four_ranks_publishing(false).await;
    let gw = support::gateway(&[&sim], &[]).await;
    support::eventually("all four ranks subscribed", || async {
        gw.logs().matches("kv events: subscribed").count() == 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Prompts cached on chosen ranks behind the gateway's back: only the events tell where.
    let hot = [
        (prompt(10, 100), 3u64),
        (prompt(11, 100), 2),
        (prompt(12, 100), 1),
    ];
    for (p, rank) in &hot {
        let (status, _) = generate(&sim, p, json!({"data_parallel_rank": rank})).await;
        assert_eq!(status, 200);
    }
    support::eventually("the ranks' blocks indexed", || async {
        let text = support::metrics_text(&gw.url).await;
        support::metric_sum(&text, "switchboard_kv_index_blocks") >= 18.0
    })
    .await;
    for (p, rank) in &hot {
        let body = json!({"input_ids": p, "sampling_params": {"max_new_tokens": 2}});
        let r = support::post(format!("{}/generate", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200);
        let log = sim_request_log(&sim.url).await;
        assert_eq!(
            log.last().unwrap()["dp_rank"],
            *rank,
            "a prompt rank {rank} holds went elsewhere"
        );
    }
}

/// A sim with four DP ranks publishing KV events (`grpc`: in `--grpc-mode`). Rank r publishes
/// at port + r (SGLang's `offset_port`).
pub(crate) async fn four_ranks_publishing(grpc: bool) -> Proc {
    let flags = ["--dp-size", "4", "--zero-latency", "--page-size", "16"];
    support::publishing_sim(grpc, &flags, |port| {
        json!({"publisher": "zmq", "endpoint": format!("tcp://*:{port}")}).to_string()
    })
    .await
}
