//! Real Python clients against the simulator and the gateway: the official OpenAI SDK
//! (tests/python/openai_sdk_check.py) and SGLang 0.5.9's bench_serving
//! (tests/python/bench_serving.py). The python comes from `SWITCHBOARD_PYTHON`, made by
//! `.ci/python-env.sh`:
//!
//! `SWITCHBOARD_PYTHON=$(bash .ci/python-env.sh | tail -1) cargo test --test it python_clients::`

use crate::support::{self, Proc};

use serde_json::Value;

/// Bound on one python run; the slowest (gsp, 200 prompts of ~2.2k tokens) takes ~10 s.
/// Sims run 10× faster than the modelled GPU so the whole file stays short.
pub(crate) const SIM_FAST: &[&str] = &["--time-scale", "0.1"];
const BACKENDS: [&str; 3] = ["sglang", "sglang-oai", "sglang-oai-chat"];
const NUM_PROMPTS: usize = 200;
const GSP_GROUPS: usize = 8;
const GSP_PER_GROUP: usize = 25;

fn bench_args(url: &str, backend: &str, dataset: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--base-url",
        url,
        "--backend",
        backend,
        "--dataset-name",
        dataset,
        "--max-concurrency",
        "32",
    ]
    .map(String::from)
    .to_vec();
    let rest: Vec<String> = match dataset {
        "random-ids" => vec![
            "--num-prompts".into(),
            NUM_PROMPTS.to_string(),
            "--random-input-len".into(),
            "128".into(),
            "--random-output-len".into(),
            "32".into(),
        ],
        "generated-shared-prefix" => vec![
            "--gsp-num-groups".into(),
            GSP_GROUPS.to_string(),
            "--gsp-prompts-per-group".into(),
            GSP_PER_GROUP.to_string(),
            "--gsp-system-prompt-len".into(),
            "2048".into(),
            "--gsp-question-len".into(),
            "128".into(),
            "--gsp-output-len".into(),
            "32".into(),
        ],
        other => panic!("no args for dataset {other}"),
    };
    a.extend(rest);
    a
}

/// The OpenAI SDK check (tests/python/openai_sdk_check.py) against `gw`, serving `MODEL`.
async fn openai_sdk_check(python: &str, gw: &Proc) {
    let r = support::python::run(
        python,
        "tests/python/openai_sdk_check.py",
        vec![gw.url.clone(), support::MODEL.into()],
    )
    .await;
    assert_eq!(r["ok"], true, "{r}");
}

/// One bench_serving run; the runner already exits non-zero on these, the asserts
/// here say what went wrong in the test's own words.
pub(crate) async fn bench(python: &str, url: &str, backend: &str, dataset: &str) -> Value {
    bench_with(python, url, backend, dataset, &[]).await
}

/// [`bench`] with more bench_serving flags (`--model`, `--tokenizer`, …).
pub(crate) async fn bench_with(
    python: &str,
    url: &str,
    backend: &str,
    dataset: &str,
    extra: &[&str],
) -> Value {
    let mut args = bench_args(url, backend, dataset);
    args.extend(extra.iter().map(|a| a.to_string()));
    let r = support::python::run(python, "tests/python/bench_serving.py", args).await;
    let what = format!("{backend} {dataset}");
    assert_eq!(r["failed"], 0, "{what}: failed requests: {r}");
    assert_eq!(r["completed"], NUM_PROMPTS, "{what}: completed: {r}");
    assert_eq!(
        r["total_output_tokens_retokenized"], r["total_output_tokens"],
        "{what}: retokenized != generated: {r}"
    );
    r
}

#[tokio::test]
async fn openai_sdk_through_gateway_to_two_sims() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let flags = [SIM_FAST, &["--enable-cache-report"]].concat();
    let (s1, s2) = (support::sim(&flags).await, support::sim(&flags).await);
    let gw = support::gateway(&[&s1, &s2], &[]).await;
    openai_sdk_check(&py, &gw).await;
}

#[tokio::test]
async fn bench_serving_against_sim() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let sim = support::sim(SIM_FAST).await;
    for dataset in ["random-ids", "generated-shared-prefix"] {
        for backend in BACKENDS {
            bench(&py, &sim.url, backend, dataset).await;
        }
    }
}

#[tokio::test]
async fn bench_serving_through_gateway() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let (s1, s2) = (support::sim(SIM_FAST).await, support::sim(SIM_FAST).await);
    let gw = support::gateway(&[&s1, &s2], &[]).await;
    for backend in BACKENDS {
        bench(&py, &gw.url, backend, "random-ids").await;
    }
}

/// `--whole-answers at-once`: the same real clients, their non-streaming requests answered by
/// the workers in one response each (bench_serving with `--disable-stream`).
#[tokio::test]
async fn openai_sdk_and_bench_serving_with_whole_answers_at_once() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let flags = [SIM_FAST, &["--enable-cache-report"]].concat();
    let (s1, s2) = (support::sim(&flags).await, support::sim(&flags).await);
    let gw = support::gateway(&[&s1, &s2], &["--whole-answers", "at-once"]).await;
    openai_sdk_check(&py, &gw).await;
    for backend in BACKENDS {
        bench_with(&py, &gw.url, backend, "random-ids", &["--disable-stream"]).await;
    }
}

/// The same clients through the gateway in front of two `grpc://` workers (sims in
/// `--grpc-mode`): chat and completions on the token-id path, `/generate` translated.
#[tokio::test]
async fn openai_sdk_and_bench_serving_through_gateway_to_grpc_sims() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let (s1, s2) = (
        support::grpc_sim(SIM_FAST).await,
        support::grpc_sim(SIM_FAST).await,
    );
    let gw = support::gateway(&[&s1, &s2], &[]).await;
    openai_sdk_check(&py, &gw).await;
    for backend in BACKENDS {
        bench(&py, &gw.url, backend, "random-ids").await;
    }
}

#[tokio::test]
async fn prefix_cache_visible_on_shared_prefix() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let sim = support::sim(SIM_FAST).await;
    bench(&py, &sim.url, "sglang", "generated-shared-prefix").await;

    let text = support::metrics_text(&sim.url).await;
    let cached = support::metric_sum(&text, "sglang:cached_tokens_total");
    let prompt = support::metric_sum(&text, "sglang:prompt_tokens_total");
    assert!(prompt > 0.0, "no prompt tokens counted:\n{text}");
    // Every request of a group shares its 2048-token system prompt, ~94 % of its
    // ~2180 prompt tokens (the 128-token question and template are unique). Only a
    // group's first request must miss, so an ideal cache hits ~0.94 × (1 − 1/25) ≈ 0.90
    // of all prompt tokens (the fresh sim saw only this run; the warmup request repeats
    // a prompt and only adds hits). We require 0.8 × (1 − 1/per_group) = 0.77: the 20 %
    // slack covers the unique questions plus a few extra misses from the first wave of
    // 32 concurrent requests, which can reach a group before its prefix is cached.
    let bound = 0.8 * (1.0 - 1.0 / GSP_PER_GROUP as f64);
    let share = cached / prompt;
    eprintln!(
        "prefix cache: cached {cached} of {prompt} prompt tokens = {share:.3} (bound {bound:.3})"
    );
    assert!(
        share >= bound,
        "cached share {share:.3} ({cached}/{prompt}) below {bound:.3}"
    );
}
