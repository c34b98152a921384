//! What SGLang refuses after its 200, through the gateway, against both simulated versions: a
//! `/generate` stream's error event (the client's bad input) is a 400, never a 502; a full
//! queue while streaming goes to another worker, or is a 503 with one; and 0.5.9's load report
//! still gives the router waiting tokens.

use crate::support::{self, Proc, MODEL};

use serde_json::{json, Value};

const VERSIONS: [&str; 2] = ["0.5.9", "0.5.23"];

async fn post(url: String, body: &Value) -> (u16, String) {
    let r = support::post(url, body).await;
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

fn error_of(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    v["error"].clone()
}

/// A sim with a small context behind a gateway that believes in a large one, so the worker is
/// the one that refuses.
async fn small_context(version: &str) -> (Proc, Proc) {
    let sim = support::sim(&["--sglang-version", version, "--context-length", "64"]).await;
    let gw = support::gateway(&[&sim], &["--context-length", "8192"]).await;
    (sim, gw)
}

#[tokio::test]
async fn bad_input_refused_inside_a_stream_is_a_400() {
    for version in VERSIONS {
        let (_sim, gw) = small_context(version).await;
        let long: Vec<u32> = (1..=100).collect();
        let (status, body) = post(
            format!("{}/generate", gw.url),
            &json!({"input_ids": long, "sampling_params": {"max_new_tokens": 4}, "stream": true}),
        )
        .await;
        assert_eq!(status, 400, "{version} /generate over the context: {body}");
        let msg = error_of(&body)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(msg.contains("context length"), "{version}: {body}");

        let (status, body) = post(
            format!("{}/generate", gw.url),
            &json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "temperature": -1}, "stream": true}),
        )
        .await;
        assert_eq!(status, 400, "{version} /generate temperature -1: {body}");
        assert!(
            error_of(&body)["message"]
                .as_str()
                .is_some_and(|m| m.contains("temperature")),
            "{version}: {body}"
        );

        let words = "word ".repeat(200);
        let (status, body) = post(
            format!("{}/v1/chat/completions", gw.url),
            &json!({"model": MODEL, "messages": [{"role": "user", "content": words}], "max_tokens": 4, "stream": true}),
        )
        .await;
        assert_eq!(status, 400, "{version} chat over the context: {body}");
        assert_eq!(
            error_of(&body)["type"],
            "invalid_request_error",
            "{version}: {body}"
        );
    }
}

fn generate_stream() -> Value {
    json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}, "stream": true})
}

fn chat_stream() -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true})
}

#[tokio::test]
async fn queue_full_while_streaming_is_retried_on_another_worker() {
    for version in VERSIONS {
        let (full, _hog) = support::full_sim(version).await;
        let free = support::sim(&["--sglang-version", version, "--time-scale", "0.01"]).await;
        let gw = support::gateway(&[&full, &free], &["--policy", "round_robin"]).await;
        // Round robin sends one of each pair to the full worker first.
        for i in 0..2 {
            for (path, body) in [
                ("/generate", generate_stream()),
                ("/v1/chat/completions", chat_stream()),
            ] {
                let (status, text) = post(format!("{}{path}", gw.url), &body).await;
                assert_eq!(status, 200, "{version} {path} #{i}: {text}");
                assert!(
                    text.contains("[DONE]") && !text.contains("\"error\""),
                    "{version} {path}: {text}"
                );
            }
        }
        let retries = support::metric_sum(
            &support::metrics_text(&gw.url).await,
            "switchboard_retries_total",
        );
        assert!(retries >= 2.0, "{version}: {retries} retries");
    }
}

#[tokio::test]
async fn queue_full_while_streaming_on_the_only_worker_is_a_503() {
    for version in VERSIONS {
        let (full, _hog) = support::full_sim(version).await;
        let gw = support::gateway(&[&full], &[]).await;
        for (path, body) in [
            ("/generate", generate_stream()),
            ("/v1/chat/completions", chat_stream()),
        ] {
            let (status, text) = post(format!("{}{path}", gw.url), &body).await;
            assert!(
                matches!(status, 503 | 429),
                "{version} {path}: {status} {text}"
            );
        }
    }
}

/// One running request and one waiting with a 50-token prompt, sent to the sim directly.
async fn one_running_one_waiting(sim: &Proc) -> (reqwest::Response, reqwest::Response) {
    let running = json!({"input_ids": (1..=100).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 5000, "ignore_eos": true}, "stream": true});
    let mut a = support::post(format!("{}/generate", sim.url), &running).await;
    a.chunk().await.expect("first chunk");
    let waiting = json!({"input_ids": (500..550).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 4}, "stream": true});
    let b = support::post(format!("{}/generate", sim.url), &waiting).await;
    (a, b)
}

#[tokio::test]
async fn waiting_tokens_reach_the_router_from_both_versions() {
    for (version, source) in [("0.5.9", "get_load"), ("0.5.23", "v1_loads")] {
        // Without `--enable-metrics`, as SGLang starts by default: nothing comes from `/metrics`.
        let sim = support::bare_sim(&[
            "--sglang-version",
            version,
            "--max-running-requests",
            "1",
            "--decode-base-us",
            "20000",
        ])
        .await;
        let gw = support::gateway(&[&sim], &[]).await;
        let _held = one_running_one_waiting(&sim).await;
        support::eventually("the waiting prompt shows in GET /workers", || async {
            let v = support::workers(&gw.url).await;
            let w = &v["workers"][0];
            w["engine_load"]["waiting_uncached_tokens"] == 50
                && w["engine_load_sources"]["waiting_uncached_tokens"] == source
                && w["engine_load_sources"]["running_requests"] == "v1_loads"
        })
        .await;
    }
}

/// What SGLang streams for `n: 2` with `logprobs`: two interleaved choices, each with its token
/// logprobs, then the usage chunk (the simulator does not model `n` or logprobs).
const N2_LOGPROBS_STREAM: &str = concat!(
    "data: {\"id\":\"r\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"r\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"r\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" Hi\"},\"logprobs\":{\"content\":[{\"token\":\" Hi\",\"logprob\":-0.25,\"bytes\":[32,72,105],\"top_logprobs\":[]}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"r\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\" Yo\"},\"logprobs\":{\"content\":[{\"token\":\" Yo\",\"logprob\":-1.5,\"bytes\":[32,89,111],\"top_logprobs\":[]}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"r\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"id\":\"r\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":1,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"id\":\"r\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n",
    "data: [DONE]\n\n",
);

#[tokio::test]
async fn a_relayed_stream_with_n_choices_and_logprobs_is_intact() {
    use axum::http::header;
    let worker = support::fake_worker(axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                N2_LOGPROBS_STREAM,
            )
        }),
    ))
    .await;
    // Forwarded as it is only by an OpenAI-backend gateway (an SGLang one generates the choices
    // itself, see `openai_choices`).
    let gw = support::gateway(
        &[],
        &[
            "--worker-urls",
            &worker,
            "--load-poll-interval-ms",
            "0",
            "--backend",
            "openai",
        ],
    )
    .await;
    support::ready(&gw).await;
    let (status, body) = post(
        format!("{}/v1/chat/completions", gw.url),
        &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2, "logprobs": true, "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, N2_LOGPROBS_STREAM);
}
