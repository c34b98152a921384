//! Speculative-decoding workers (issue 22): several tokens per chunk reach the client exactly on
//! every relay path (the token path, byte forwarding, a migration in the middle of a burst), and
//! bench_serving reads the same accept length through the gateway as from the worker.

use serde_json::{json, Value};

use crate::support::{self, Proc, MODEL};

/// EAGLE (3, 1, 4) with slow rounds (~38 ms), so a stream's chunks are mostly the engine's
/// rounds.
const SPEC_SLOW: &[&str] = &[
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--decode-base-us",
    "20000",
];
const TOKENS: usize = 40;

/// The `/generate` stream of `input_ids` (SGLang's default cumulative chunks): each chunk's
/// `completion_tokens`, and the final `output_ids`.
async fn generate_stream(url: &str, input_ids: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let body = json!({"input_ids": input_ids, "stream": true,
                      "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": true}});
    let r = support::post(format!("{url}/generate"), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("body");
    let chunks: Vec<Value> = support::sse_data(&text)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let counts = chunks
        .iter()
        .map(|c| c["meta_info"]["completion_tokens"].as_u64().unwrap_or(0))
        .collect();
    let ids = chunks
        .last()
        .and_then(|c| c["output_ids"].as_array())
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    (counts, ids)
}

fn largest_step(counts: &[u64]) -> u64 {
    counts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
}

/// The gateway's inter-token samples for one endpoint.
async fn itl_count(gw: &Proc, endpoint: &str) -> f64 {
    let text = support::metrics_text(&gw.url).await;
    support::metric_sum(
        &text,
        &format!("switchboard_inter_token_latency_seconds_count{{endpoint=\"{endpoint}\""),
    )
}

/// Native `/generate` (forwarded byte for byte): the same chunks as from the worker, one ITL
/// sample per token after the first chunk.
#[tokio::test]
async fn multi_token_chunks_pass_through_generate() {
    let sim = support::sim(SPEC_SLOW).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let prompt: Vec<u64> = (1000..1016).collect();
    let (direct_counts, direct_ids) = generate_stream(&sim.url, &prompt).await;
    let (counts, ids) = generate_stream(&gw.url, &prompt).await;
    assert_eq!(ids, direct_ids, "the same tokens");
    assert_eq!(ids.len(), TOKENS);
    assert!(
        largest_step(&counts) > 1,
        "a chunk of several tokens: {counts:?}"
    );
    // (No upper bound: a round holds at most 4 tokens, but a sim whose writer lagged merges
    // rounds into one chunk.)
    assert_eq!(counts.last(), direct_counts.last());
    // ITL: every token after the first chunk is one sample, however many shared a chunk.
    let first = counts.first().copied().unwrap_or(0) as f64;
    assert_eq!(itl_count(&gw, "generate").await, TOKENS as f64 - first);
}

/// A streamed chat's content deltas and usage.
async fn chat_stream(url: &str, content: &str) -> (Vec<String>, Value, bool) {
    let body = json!({"model": MODEL, "max_tokens": TOKENS, "ignore_eos": true, "stream": true,
                      "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": content}]});
    let r = support::post(format!("{url}/v1/chat/completions"), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.expect("body");
    let mut deltas = Vec::new();
    let mut usage = Value::Null;
    for d in support::sse_data(&text) {
        if let Ok(v) = serde_json::from_str::<Value>(&d) {
            if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
                deltas.push(c.to_owned());
            }
            if !v["usage"].is_null() {
                usage = v["usage"].clone();
            }
        }
    }
    (deltas, usage, text.contains("[DONE]"))
}

fn token_counts(deltas: &[String]) -> Vec<usize> {
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    deltas
        .iter()
        .map(|d| tok.encode(d, false).expect("encode").len())
        .collect()
}

/// The token path (chat, tokenized here, token ids from the worker's `/generate`) and the
/// forwarded OpenAI route (`--backend openai`): a round's tokens arrive as one chunk, and the
/// text is the worker's.
#[tokio::test]
async fn multi_token_chunks_on_the_token_path_and_the_forwarded_chat() {
    let sim = support::sim(SPEC_SLOW).await;
    let native = support::gateway(&[&sim], &[]).await;
    let forwarding = support::gateway(&[&sim], &["--backend", "openai"]).await;
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");

    // Token path: the reference is the worker's answer to the ids the gateway sent it.
    let (deltas, usage, done) = chat_stream(&native.url, "tell me about llamas").await;
    assert!(done);
    assert_eq!(usage["completion_tokens"], TOKENS);
    let sent = support::sim_request_log(&sim.url).await;
    let prompt: Vec<u64> = sent.last().expect("a request")["input_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let (_, ids) = generate_stream(&sim.url, &prompt).await;
    let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
    assert_eq!(deltas.concat(), tok.decode(&ids, true).expect("decode"));
    let counts = token_counts(&deltas);
    assert!(
        counts.iter().any(|&n| n > 1),
        "several tokens in a chunk: {counts:?}"
    );
    let first = counts.iter().find(|&&n| n > 0).copied().unwrap_or(0) as f64;
    assert_eq!(itl_count(&native, "chat").await, TOKENS as f64 - first);

    // Forwarded: the worker's own chat stream, chunk for chunk.
    let (direct, direct_usage, _) = chat_stream(&sim.url, "and alpacas").await;
    let (relayed, relayed_usage, done) = chat_stream(&forwarding.url, "and alpacas").await;
    assert!(done);
    assert_eq!(relayed.concat(), direct.concat());
    assert_eq!(
        relayed_usage["completion_tokens"],
        direct_usage["completion_tokens"]
    );
    let counts = token_counts(&relayed);
    assert!(
        counts.iter().any(|&n| n > 1),
        "several tokens in a chunk: {counts:?}"
    );
}

/// The worker dies in the middle of a round's burst: every token it sent is kept, and the next
/// worker continues from exactly those.
#[tokio::test]
async fn a_migration_mid_burst_loses_nothing() {
    let dying = support::sim(SPEC_SLOW).await;
    let healthy = support::sim(SPEC_SLOW).await;
    // Learn the prompt the gateway sends and where the dying worker's rounds end.
    let probe = support::gateway(&[&dying], &[]).await;
    let question = "a long answer please";
    chat_stream(&probe.url, question).await;
    let sent = support::sim_request_log(&dying.url).await;
    let prompt: Vec<u64> = sent.last().expect("a request")["input_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let (counts, plan) = generate_stream(&dying.url, &prompt).await;
    let cut = counts
        .windows(2)
        .find(|w| w[1] - w[0] > 1)
        .map(|w| w[0] + 1)
        .expect("a round of several tokens");
    support::set_faults(&dying, json!({"die_after_tokens": cut})).await;

    let gw = support::gateway(&[&dying, &healthy], &["--policy", "round_robin"]).await;
    let (deltas, usage, done) = chat_stream(&gw.url, question).await;
    assert!(done, "one unbroken stream");
    assert_eq!(usage["completion_tokens"], TOKENS);
    let text = support::metrics_text(&gw.url).await;
    assert!(support::metric_sum(&text, "switchboard_migrations_total") >= 1.0);
    // The continuation got the prompt plus every token the dead worker sent, mid-burst cut
    // included.
    let continued = support::sim_request_log(&healthy.url).await;
    let got: Vec<u64> = continued.last().expect("a continuation")["input_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let mut want = prompt.clone();
    want.extend_from_slice(&plan[..cut as usize]);
    assert_eq!(got, want, "continued from the {cut} tokens received");
    let tok = switchboard::bundled::tokenizer().expect("tokenizer");
    let first: Vec<u32> = plan[..cut as usize].iter().map(|&i| i as u32).collect();
    let head = tok.decode(&first, true).expect("decode");
    assert!(
        deltas.concat().starts_with(&head),
        "{deltas:?} starts with {head:?}"
    );
}

fn bench_args(url: &str) -> Vec<String> {
    [
        "--base-url",
        url,
        "--backend",
        "sglang",
        "--dataset-name",
        "random-ids",
        "--num-prompts",
        "16",
        "--random-input-len",
        "128",
        "--random-output-len",
        "512",
        "--random-range-ratio",
        "1.0",
        "--max-concurrency",
        "8",
    ]
    .map(String::from)
    .to_vec()
}

/// Acceptance 1: bench_serving against an EAGLE (3, 1, 4) sim, directly and through the
/// gateway, prints the same accept length (the sim's draws follow each request's tokens, so the
/// second run repeats the first's rounds).
#[tokio::test]
async fn bench_serving_reads_the_accept_length_through_the_gateway() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let sim = support::sim(&[
        "--time-scale",
        "0.1",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ])
    .await;
    let gw = support::gateway(&[&sim], &[]).await;
    let mut lengths = Vec::new();
    for url in [&sim.url, &gw.url] {
        let r = support::python::run(&py, "tests/python/bench_serving.py", bench_args(url)).await;
        assert_eq!(r["failed"], 0, "{r}");
        assert_eq!(r["completed"], 16, "{r}");
        assert_eq!(
            r["total_output_tokens_retokenized"], r["total_output_tokens"],
            "{r}"
        );
        let len = r["accept_length"].as_f64();
        assert!(
            len.is_some_and(|l| l > 1.0),
            "an accept length from {url}: {r}"
        );
        lengths.push(len.unwrap_or(0.0));
    }
    assert!(
        (lengths[0] - lengths[1]).abs() <= 0.01,
        "direct {} vs gateway {}",
        lengths[0],
        lengths[1]
    );
    // The worker's own figure stays available per worker.
    let info = support::get_json(&format!("{}/get_server_info", gw.url)).await;
    assert!(
        info["workers"][0]["internal_states"][0]["avg_spec_accept_length"].is_f64(),
        "{info}"
    );
}

/// The sim's own report, per version: server args, `avg_spec_accept_length` once a round ran,
/// and the spec gauges each release exports.
#[tokio::test]
async fn the_sim_reports_speculation_as_sglang_does() {
    for version in ["0.5.9", "0.5.23"] {
        let mut flags = SPEC_SLOW.to_vec();
        flags.extend(["--sglang-version", version, "--time-scale", "0.1"]);
        let sim = support::sim(&flags).await;
        let before = support::get_json(&format!("{}/server_info", sim.url)).await;
        assert_eq!(before["speculative_algorithm"], "EAGLE");
        assert_eq!(before["speculative_num_draft_tokens"], 4);
        assert!(before["internal_states"][0]
            .get("avg_spec_accept_length")
            .is_none());
        let prompt: Vec<u64> = (7..30).collect();
        let (_, ids) = generate_stream(&sim.url, &prompt).await;
        assert_eq!(ids.len(), TOKENS);
        let after = support::get_json(&format!("{}/server_info", sim.url)).await;
        let len = after["internal_states"][0]["avg_spec_accept_length"]
            .as_f64()
            .unwrap_or(0.0);
        assert!(len > 1.0 && len <= 4.0, "{version}: {after}");
        let text = support::metrics_text(&sim.url).await;
        let gauge = support::metric_sum(&text, "sglang:spec_accept_length");
        assert!(gauge > 1.0 && gauge <= 4.0, "{version}:\n{text}");
        let rate = support::metric_sum(&text, "sglang:spec_accept_rate");
        assert!(rate > 0.0 && rate <= 1.0, "{version}:\n{text}");
        let extended = text.contains("sglang:spec_num_steps");
        assert_eq!(extended, version == "0.5.23", "{version}:\n{text}");
        if extended {
            assert_eq!(support::metric_sum(&text, "sglang:spec_num_steps"), 3.0);
            // TOKENS tokens, the first from prefill, the rest at most 4 a round.
            let rounds = support::metric_sum(&text, "sglang:spec_verify_calls_total");
            assert!(
                rounds >= (TOKENS as f64 - 1.0) / 4.0 && rounds < TOKENS as f64,
                "{rounds}"
            );
        }
    }
}
