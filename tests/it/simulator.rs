//! The simulated SGLang worker over HTTP: wire shapes, prefix cache, load reporting, faults.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

async fn post(url: &str, body: &Value) -> reqwest::Response {
    support::post(url, body).await
}

/// A prefix seen once is cached: the worker reports it in `cached_tokens`. (How much that
/// cuts time to first token is for a benchmark to show, not for a test to assert.)
#[tokio::test]
async fn warm_prefix_is_reported_as_cached() {
    let sim = support::sim(&["--context-length", "8192"]).await;
    let prefix: Vec<u32> = (0..2048).map(|i| 1000 + (i * 7) % 5000).collect();
    let with_question = |q: u32| -> Vec<u32> {
        prefix
            .iter()
            .copied()
            .chain((0..128).map(|i| 20 + q + i))
            .collect()
    };
    let generate = |q: u32| {
        let body = json!({"input_ids": with_question(q), "sampling_params": {"max_new_tokens": 1}});
        let url = format!("{}/generate", sim.url);
        async move {
            let v: Value = post(&url, &body).await.json().await.expect("json");
            v["meta_info"]["cached_tokens"]
                .as_u64()
                .expect("cached_tokens")
        }
    };
    assert_eq!(generate(0).await, 0, "a cold prompt has nothing cached");
    assert!(generate(900).await >= 2048);
}

#[tokio::test]
async fn generate_stream_is_cumulative_by_default_and_incremental_on_request() {
    for (flags, cumulative) in [
        (vec![], true),
        (vec!["--incremental-streaming-output"], false),
    ] {
        let mut args = vec!["--time-scale", "0.01"];
        args.extend(flags);
        let sim = support::sim(&args).await;
        let body = json!({"text": "Hello", "sampling_params": {"max_new_tokens": 5, "ignore_eos": true}, "stream": true});
        let text = post(&format!("{}/generate", sim.url), &body)
            .await
            .text()
            .await
            .expect("body");
        let data = support::sse_data(&text);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).expect("chunk json"))
            .collect();
        let last = chunks.last().expect("chunks");
        assert_eq!(last["meta_info"]["completion_tokens"], 5);
        assert_eq!(last["meta_info"]["finish_reason"]["type"], "length");
        assert!(last["meta_info"]["e2e_latency"].is_number());
        let ids: usize = chunks
            .iter()
            .map(|c| c["output_ids"].as_array().map_or(0, Vec::len))
            .sum();
        if cumulative {
            assert_eq!(last["output_ids"].as_array().map(Vec::len), Some(5));
        } else {
            assert_eq!(ids, 5);
        }
    }
}

#[tokio::test]
async fn loads_report_running_and_waiting() {
    let sim = support::sim(&[
        "--sglang-version",
        "0.5.23",
        "--max-running-requests",
        "1",
        "--decode-base-us",
        "20000",
    ])
    .await;
    let body = json!({"input_ids": (1..=100).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 200}, "stream": true});
    let mut a = post(&format!("{}/generate", sim.url), &body).await;
    a.chunk().await.expect("chunk");
    let body2 = json!({"input_ids": (500..=549).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 200}, "stream": true});
    let _b = post(&format!("{}/generate", sim.url), &body2).await;
    let v = support::get_json(&format!("{}/v1/loads", sim.url)).await;
    let l = &v["loads"][0];
    assert_eq!(l["num_running_reqs"], 1);
    assert_eq!(l["num_waiting_reqs"], 1);
    assert_eq!(l["num_waiting_uncached_tokens"], 50);
    // 0.5.23 has no /get_load (0.5.9's shape: tests/it/sim_versions.rs).
    let legacy = support::client()
        .get(format!("{}/get_load", sim.url))
        .send()
        .await
        .expect("get_load");
    assert_eq!(legacy.status().as_u16(), 404);
}

#[tokio::test]
async fn queue_full_is_503() {
    let sim = support::sim(&[
        "--max-running-requests",
        "1",
        "--max-queued-requests",
        "0",
        "--decode-base-us",
        "20000",
    ])
    .await;
    let body =
        json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 100}, "stream": true});
    let mut a = post(&format!("{}/generate", sim.url), &body).await;
    a.chunk().await.expect("chunk");
    let r = post(
        &format!("{}/generate", sim.url),
        &json!({"input_ids": [4, 5], "sampling_params": {"max_new_tokens": 3}}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 503);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["message"], "The request queue is full.");
}

#[tokio::test]
async fn errors_use_sglang_shapes() {
    let sim = support::sim(&["--sglang-version", "0.5.23", "--context-length", "16"]).await;
    let r = post(
        &format!("{}/generate", sim.url),
        &json!({"input_ids": [1, 2], "sampling_params": {"bogus": 1}}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("json");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("bogus")),
        "{v}"
    );
    let r = post(
        &format!("{}/generate", sim.url),
        &json!({"input_ids": (0..40).collect::<Vec<u32>>()}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test]
async fn fault_knobs_change_at_run_time() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gen = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 10, "ignore_eos": true}, "stream": true});
    post(
        &format!("{}/sim/faults", sim.url),
        &json!({"error_rate": 1.0}),
    )
    .await;
    assert_eq!(
        post(&format!("{}/generate", sim.url), &gen)
            .await
            .status()
            .as_u16(),
        500
    );
    post(
        &format!("{}/sim/faults", sim.url),
        &json!({"die_after_tokens": 3}),
    )
    .await;
    let r = post(&format!("{}/generate", sim.url), &gen).await;
    assert!(r.text().await.is_err(), "the stream should break off");
    post(
        &format!("{}/sim/faults", sim.url),
        &json!({"flap_health_secs": 0.2}),
    )
    .await;
    // Sampled until both answers were seen (~0.2 s each way), for at most 5 s.
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.len() < 2 && Instant::now() < deadline {
        seen.insert(
            support::client()
                .get(format!("{}/health", sim.url))
                .send()
                .await
                .expect("health")
                .status()
                .as_u16(),
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert_eq!(seen, [200, 503].into_iter().collect());
    post(&format!("{}/sim/faults", sim.url), &json!({})).await;
    assert_eq!(
        post(&format!("{}/generate", sim.url), &gen)
            .await
            .status()
            .as_u16(),
        200
    );
}

#[tokio::test]
async fn abort_request_frees_the_slot() {
    let sim = support::sim(&["--decode-base-us", "20000"]).await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1000}, "stream": true, "rid": "job-7"});
    let mut r = post(&format!("{}/generate", sim.url), &body).await;
    r.chunk().await.expect("chunk");
    // The front end passes an abort on only for an exact live rid; a mere prefix is ignored.
    post(
        &format!("{}/abort_request", sim.url),
        &json!({"rid": "job-"}),
    )
    .await;
    assert_eq!(support::sim_busy(&sim.url).await, 1);
    post(
        &format!("{}/abort_request", sim.url),
        &json!({"rid": "job-7"}),
    )
    .await;
    let rest = r.text().await.expect("rest");
    let last: Value = support::sse_data(&rest)
        .iter()
        .rev()
        .find_map(|d| serde_json::from_str(d).ok())
        .expect("an abort chunk");
    // A running request ends "Aborted", with its cumulative text and ids.
    assert_eq!(
        last["meta_info"]["finish_reason"]["message"], "Aborted",
        "{rest}"
    );
    assert!(
        !last["output_ids"].as_array().expect("ids").is_empty(),
        "{rest}"
    );
    let v = support::get_json(&format!("{}/v1/loads", sim.url)).await;
    assert_eq!(v["loads"][0]["num_running_reqs"], 0);
}

#[test]
fn help_documents_every_knob() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["sim", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--port",
        "--model-name",
        "--tokenizer-path",
        "--time-scale",
        "--zero-latency",
        "--max-running-requests",
        "--max-queued-requests",
        "--kv-capacity-tokens",
        "--chunked-prefill-size",
        "--page-size",
        "--prefill-base-us",
        "--decode-base-us",
        "--decode-batch-knee",
        "--fault-error-rate",
        "--fault-die-after-tokens",
        "--fault-stall-secs",
        "--fault-slow-health-secs",
        "--fault-flap-health-secs",
        "--fault-refuse-connections",
        "--incremental-streaming-output",
        "--enable-cache-report",
    ] {
        assert!(help.contains(flag), "sim --help lacks {flag}");
    }
}

/// SGLang notices a non-streaming client that left only at its next 4 s disconnect check, so
/// a gateway that forgets `/abort_request` leaves the request running meanwhile.
#[tokio::test]
async fn a_non_streaming_client_that_leaves_is_noticed_at_the_next_check() {
    let sim = support::sim(&["--decode-base-us", "20000"]).await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5000, "ignore_eos": true}});
    let gave_up = support::client()
        .post(format!("{}/generate", sim.url))
        .json(&body)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client gave up");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(support::sim_busy(&sim.url).await, 1, "still running");
    support::eventually("the request is aborted at the 4 s check", || async {
        support::sim_busy(&sim.url).await == 0
    })
    .await;
}

/// A stall fault comes after exactly its token count, even where the engine outran the stream
/// (with no step cost it can finish before the stream's first read): the tokens past the count
/// wait out the stall, so a gateway's idle timeout always has a stall to see.
#[tokio::test]
async fn a_stall_comes_after_its_token_count_however_far_the_engine_ran() {
    let sim = support::sim(&[
        "--zero-latency",
        "--fault-stall-secs",
        "1",
        "--fault-stall-after-tokens",
        "3",
    ])
    .await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 20, "ignore_eos": true}, "stream": true});
    let t = Instant::now();
    let text = post(&format!("{}/generate", sim.url), &body)
        .await
        .text()
        .await
        .expect("body");
    let counts: Vec<u64> = support::sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c["meta_info"]["completion_tokens"].as_u64())
        .collect();
    assert!(counts.contains(&3), "{counts:?}");
    assert_eq!(counts.last(), Some(&20));
    assert!(t.elapsed() >= Duration::from_secs(1));
}

/// `--log-level switchboard::sim::driver=debug`: a line per admitted request and per scheduler
/// step, which says what the step did (how a load's arrivals fall into prefill batches).
#[tokio::test]
async fn debug_logging_shows_each_step() {
    let sim = support::sim(&["--log-level", "switchboard::sim::driver=debug"]).await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}});
    let r = post(&format!("{}/generate", sim.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    r.bytes().await.expect("body");
    let wanted = [
        "request admitted id=",
        "step kind=Prefill started=1 finished=0",
        "step kind=Decode started=0 finished=1",
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let logs = sim.logs();
        if wanted.iter().all(|w| logs.contains(w)) {
            break;
        }
        assert!(Instant::now() < deadline, "{wanted:?} not all in:\n{logs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
