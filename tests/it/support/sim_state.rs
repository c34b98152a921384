//! What a simulated worker is doing, read from its own routes (`/metrics`, `/v1/loads`), and a
//! sim made busy on purpose.

use super::{client, eventually, get_json, metric_sum, metrics_text, post, sim, Proc};

/// Sum of a simulator metric over all its labels.
pub async fn sim_metric(sim_url: &str, name: &str) -> f64 {
    metric_sum(&metrics_text(sim_url).await, name)
}

/// Requests running or waiting on a simulator (from its `/v1/loads`).
pub async fn sim_busy(sim_url: &str) -> u64 {
    let v = get_json(&format!("{sim_url}/v1/loads")).await;
    let count = |field: &str| {
        v["loads"][0][field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in {sim_url}/v1/loads: {v}"))
    };
    count("num_running_reqs") + count("num_waiting_reqs")
}

/// Sets a simulator's injected faults (`POST /sim/faults`, on its HTTP side for a gRPC sim).
pub async fn set_faults(sim: &Proc, faults: serde_json::Value) {
    let r = post(format!("{}/sim/faults", sim.http_url()), &faults).await;
    assert_eq!(r.status().as_u16(), 200);
}

/// Waits until a simulator has received `/abort_request` and has nothing running or waiting.
pub async fn sim_aborted_and_idle(sim_url: &str) {
    eventually("abort_request reached the worker", || async {
        sim_metric(sim_url, "sim_abort_requests_received_total").await >= 1.0
    })
    .await;
    eventually("worker idle", || async { sim_busy(sim_url).await == 0 }).await;
}

/// A sim that runs one request and queues none, busy with a long request sent to it directly.
pub async fn full_sim(version: &str) -> (Proc, reqwest::Response) {
    let sim = sim(&[
        "--sglang-version",
        version,
        "--max-running-requests",
        "1",
        "--max-queued-requests",
        "0",
        "--decode-base-us",
        "20000",
    ])
    .await;
    let hog = serde_json::json!({"input_ids": [7, 8, 9], "sampling_params": {"max_new_tokens": 5000, "ignore_eos": true}, "stream": true});
    let mut r = post(format!("{}/generate", sim.url), &hog).await;
    r.chunk().await.expect("the hog's first chunk");
    (sim, r)
}

/// The sim's log of the last requests it received (`GET /sim/requests`): rid, prompt ids,
/// `max_new_tokens` — what a gateway really sent.
pub async fn sim_request_log(sim_url: &str) -> Vec<serde_json::Value> {
    client()
        .get(format!("{sim_url}/sim/requests"))
        .send()
        .await
        .expect("request log")
        .json()
        .await
        .expect("json")
}

/// The sim's log entry of the request a gateway sent it as `rid`; asserts it came to
/// `/generate` (the gateway's own path, not a forwarded OpenAI route).
pub async fn sent_to_generate(sim_url: &str, rid: &str) -> serde_json::Value {
    let seen = sim_request_log(sim_url)
        .await
        .into_iter()
        .find(|s| s["rid"] == rid)
        .unwrap_or_else(|| panic!("the worker saw no request {rid}"));
    assert_eq!(seen["route"], "/generate", "{seen}");
    seen
}
