//! Prefill/decode disaggregation: the sims speak SGLang's PD contract (bootstrap fields, the
//! KV handed from a prefill to a decode sim, SGLang's 400 and 500s), and the gateway pairs a
//! prefill and a decode worker per request, through faults on either side.

use std::time::Duration;

use serde_json::{json, Value};

use crate::python_clients::{bench, SIM_FAST};
use crate::support::pd::{decode_sim, pd_gateway, prefill_sim};
use crate::support::{self, MODEL};

fn chat(content: &str, max_tokens: u32, stream: bool) -> Value {
    json!({"model": MODEL, "max_tokens": max_tokens, "ignore_eos": true, "stream": stream,
           "stream_options": {"include_usage": true},
           "messages": [{"role": "user", "content": content}]})
}

#[tokio::test]
async fn a_sim_in_a_pd_role_refuses_a_request_without_a_room() {
    let p = prefill_sim(&[]).await;
    let d = decode_sim(&[]).await;
    for sim in [&p.sim, &d] {
        let body = json!({"text": "hi", "rid": "r1", "sampling_params": {"max_new_tokens": 2}});
        let r = support::post(format!("{}/generate", sim.url), &body).await;
        assert_eq!(r.status().as_u16(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v["error"]["message"],
            "Invalid request: Disaggregated request received without bootstrap room id. req.rid='r1'"
        );
    }
}

#[tokio::test]
async fn a_room_nobody_prefilled_times_out_with_sglangs_error() {
    let p = prefill_sim(&[]).await;
    let d = decode_sim(&["--disaggregation-waiting-timeout-secs", "0.3"]).await;
    let body = json!({"text": "hi", "rid": "r2", "sampling_params": {"max_new_tokens": 2},
                      "bootstrap_host": "127.0.0.1", "bootstrap_port": p.bootstrap_port,
                      "bootstrap_room": 12345});
    let r = support::post(format!("{}/generate", d.url), &body).await;
    assert_eq!(r.status().as_u16(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["message"],
        "Decode transfer failed for request rank=0 decode_req.req.rid='r2' decode_req.req.bootstrap_room=12345 with exception KVTransferError(bootstrap_room=12345): Request 12345 timed out after 0.3s in KVPoll.WaitingForInput",
        "{v}"
    );
}

#[tokio::test]
async fn a_pair_answers_from_the_decode_sim_with_the_prefills_cache() {
    let p = prefill_sim(&["--enable-cache-report"]).await;
    let (d1, d2) = (decode_sim(&[]).await, decode_sim(&[]).await);
    let gw = pd_gateway(&[&p], &[&d1, &d2], &[]).await;
    let question = "the same long question about the same long topic, asked twice";
    let mut cached = Vec::new();
    for stream in [false, true] {
        let r = support::post(
            format!("{}/v1/chat/completions", gw.url),
            &chat(question, 6, stream),
        )
        .await;
        assert_eq!(r.status().as_u16(), 200);
        let usage = if stream {
            let text = r.text().await.unwrap();
            let last = support::sse_data(&text)
                .into_iter()
                .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
                .find(|v| v["usage"].is_object())
                .expect("a usage chunk");
            last["usage"].clone()
        } else {
            r.json::<Value>().await.unwrap()["usage"].clone()
        };
        assert_eq!(usage["completion_tokens"], 6, "{usage}");
        cached.push(
            usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
        );
    }
    // The decode sims have no cache of these prompts: the count is the prefill sim's.
    assert_eq!(cached[0], 0, "a cold prefill");
    assert!(
        cached[1] > 0,
        "the second prefill hit the prefix: {cached:?}"
    );
    let log = support::sim_request_log(&p.sim.url).await;
    assert_eq!(log.len(), 2, "both prefills ran on the prefill sim");
    let decoded = support::sim_request_log(&d1.url).await.len()
        + support::sim_request_log(&d2.url).await.len();
    assert_eq!(decoded, 2, "both answers came from decode sims");
    // The native path forwards SGLang's body with the pair's bootstrap fields.
    let body = json!({"text": question, "sampling_params": {"max_new_tokens": 3}});
    let r = support::post(format!("{}/generate", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["meta_info"]["completion_tokens"], 3, "{v}");
    let metrics = support::metrics_text(&gw.url).await;
    assert!(
        support::metric_sum(&metrics, "switchboard_stage_duration_seconds_count{model=\"smollm2-135m-instruct\",stage=\"pd_prefill\"}") >= 3.0,
        "per-role stage timing: {metrics}"
    );
}

/// A decode worker that takes the room's KV from the prefill sim's bootstrap port, then answers
/// one token (a stream, or one JSON object when asked so) and reports no cached tokens (as
/// decode workers that lose the count do).
async fn forgetful_decode_worker() -> String {
    async fn generate(body: axum::body::Bytes) -> axum::response::Response {
        let req: Value = serde_json::from_slice(&body).unwrap();
        let kv = format!(
            "http://{}:{}/sim/kv/{}",
            req["bootstrap_host"].as_str().unwrap(),
            req["bootstrap_port"],
            req["bootstrap_room"]
        );
        let info = support::get_json(&kv).await;
        let chunk = json!({"text": " a", "output_ids": [260],
            "meta_info": {"id": req["rid"], "prompt_tokens": info["prompt_tokens"], "completion_tokens": 1,
                          "cached_tokens": 0, "finish_reason": {"type": "length", "length": 1}}});
        if req["stream"] == false {
            return axum::Json(chunk).into_response();
        }
        let sse = format!("data: {chunk}\n\ndata: [DONE]\n\n");
        (
            [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
            sse,
        )
            .into_response()
    }
    use axum::response::IntoResponse;
    support::fake_worker(axum::Router::new().route("/generate", axum::routing::post(generate)))
        .await
}

#[tokio::test]
async fn usage_takes_cached_tokens_from_the_prefill_worker() {
    let p = prefill_sim(&[]).await;
    let d = forgetful_decode_worker().await;
    let flags = support::pd::pd_flags(&[&p], &[]);
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend(["--decode", &d]);
    let gw = support::gateway(&[], &flags).await;
    support::ready(&gw).await;
    let question = "a question asked twice, so its prefix is cached the second time";
    let mut cached = Vec::new();
    for _ in 0..2 {
        let r = support::post(
            format!("{}/v1/chat/completions", gw.url),
            &chat(question, 1, false),
        )
        .await;
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.unwrap();
        cached.push(
            v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0),
        );
    }
    assert_eq!(cached[0], 0, "{cached:?}");
    assert!(
        cached[1] > 0,
        "the prefill worker's count, not the decode's 0: {cached:?}"
    );
}

#[tokio::test]
async fn no_healthy_prefill_worker_is_a_clear_503() {
    let d = decode_sim(&[]).await;
    // A port nobody listens on: the prefill pool never has a healthy worker.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let flags = [
        "--pd-disaggregation",
        "--prefill",
        &dead_url,
        "8998",
        "--decode",
        &d.url,
    ];
    let gw = support::gateway(&[], &flags).await;
    // The decode worker is healthy; readiness still needs a prefill worker.
    support::eventually("the decode worker checked", || async {
        let m = support::metrics_text(&gw.url).await;
        support::metric_sum(&m, "switchboard_worker_healthy{") >= 1.0
    })
    .await;
    let r = support::client()
        .get(format!("{}/readiness", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let r = support::post(
        format!("{}/v1/chat/completions", gw.url),
        &chat("hi", 4, false),
    )
    .await;
    assert_eq!(r.status().as_u16(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"], "no healthy prefill worker is available",
        "{v}"
    );
}

#[tokio::test]
async fn a_prefill_worker_dying_mid_prefill_is_retried_on_another() {
    // Slow prefills (~1 s for this prompt), so the kill lands while the first one computes.
    let slow = ["--prefill-per-token-us", "5000"];
    let mut p1 = prefill_sim(&slow).await;
    let mut p2 = prefill_sim(&slow).await;
    // The decode sim takes aborts late, so the first pair's abort lands while the restarted
    // pair's request is already there: it must not hit that one.
    let d = decode_sim(&["--fault-abort-delay-secs", "0.5"]).await;
    // The default, cache-aware prefill policy: a restart would go back to the worker that has
    // the prompt unless the dead one is known as tried.
    let gw = pd_gateway(&[&p1, &p2], &[&d], &[]).await;
    support::eventually("both prefill workers healthy", || async {
        let m = support::metrics_text(&gw.url).await;
        support::metric_sum(&m, "switchboard_worker_healthy{") >= 3.0
    })
    .await;
    let question = "word ".repeat(200);
    let url = format!("{}/v1/chat/completions", gw.url);
    let body = chat(&question, 5, true);
    let request = tokio::spawn(async move { support::post(url, &body).await.text().await });
    // Whichever prefill sim got it dies while it computes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (mut on1, mut on2) = (false, false);
    while !(on1 || on2) && std::time::Instant::now() < deadline {
        on1 = !support::sim_request_log(&p1.sim.url).await.is_empty();
        on2 = !support::sim_request_log(&p2.sim.url).await.is_empty();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(on1 || on2, "a prefill started");
    let (dying, other) = if on1 { (&mut p1, &p2) } else { (&mut p2, &p1) };
    dying.sim.kill();
    let text = tokio::time::timeout(Duration::from_secs(30), request)
        .await
        .expect("the request ended")
        .unwrap()
        .unwrap();
    let (content, done) = support::chat_stream_content(&text);
    assert!(done && !content.is_empty(), "{text}");
    assert_eq!(
        support::sim_request_log(&other.sim.url).await.len(),
        1,
        "the request was prefilled again on the other prefill worker"
    );
}

#[tokio::test]
async fn a_decode_worker_dying_mid_stream_is_continued_on_another_pair() {
    let p = prefill_sim(&["--time-scale", "0.1"]).await;
    let (d1, d2) = (
        decode_sim(&["--time-scale", "0.1"]).await,
        decode_sim(&["--time-scale", "0.1"]).await,
    );
    let gw = pd_gateway(&[&p], &[&d1, &d2], &["--decode-policy", "round_robin"]).await;
    support::eventually("both decode workers healthy", || async {
        let m = support::metrics_text(&gw.url).await;
        support::metric_sum(&m, "switchboard_worker_healthy{") >= 3.0
    })
    .await;
    support::set_faults(&d1, json!({"die_after_tokens": 4})).await;
    let r = support::post(
        format!("{}/v1/chat/completions", gw.url),
        &chat("tell me more", 20, true),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    let (_, done) = support::chat_stream_content(&text);
    assert!(done, "{text}");
    let usage = support::sse_data(&text)
        .into_iter()
        .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
        .find(|v| v["usage"].is_object())
        .expect("usage")["usage"]
        .clone();
    assert_eq!(
        usage["completion_tokens"], 20,
        "one unbroken answer: {usage}"
    );
    let metrics = support::metrics_text(&gw.url).await;
    assert_eq!(
        support::metric(
            &metrics,
            "switchboard_migrations_total{outcome=\"continued\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    // The continuation was a new pair: prefill (prompt + relayed tokens) then the other decode.
    assert_eq!(support::sim_request_log(&p.sim.url).await.len(), 2);
    assert_eq!(support::sim_request_log(&d2.url).await.len(), 1);
}

/// Acceptance: SGLang's bench_serving through the gateway in PD mode (1 prefill + 2 decode).
#[tokio::test]
async fn bench_serving_through_pd_gateway() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let flags = [SIM_FAST, &["--enable-cache-report"]].concat();
    let p = prefill_sim(&flags).await;
    let (d1, d2) = (decode_sim(&flags).await, decode_sim(&flags).await);
    let gw = pd_gateway(&[&p], &[&d1, &d2], &[]).await;
    for backend in ["sglang-oai-chat", "sglang"] {
        bench(&py, &gw.url, backend, "random-ids").await;
    }
    let text = support::metrics_text(&gw.url).await;
    assert_eq!(
        support::metric_sum(&text, "switchboard_upstream_errors_total"),
        0.0
    );
}

/// Kubernetes discovery: the pod label `switchboard.ai/pd-role` sorts pods into the two pools.
#[tokio::test]
async fn discovered_pods_join_the_pool_their_label_names() {
    use crate::support::fake_kube::{pod, FakeKube};
    let kube = FakeKube::start().await;
    let p = prefill_sim(&[]).await;
    let d = decode_sim(&[]).await;
    let mut prefill_pod = pod(
        "p",
        json!({"app": "sim", "switchboard.ai/pd-role": "prefill"}),
        true,
        p.sim.port,
    );
    prefill_pod["metadata"]["annotations"]["switchboard.ai/bootstrap-port"] =
        json!(p.bootstrap_port.to_string());
    kube.put(prefill_pod);
    kube.put(pod(
        "d",
        json!({"app": "sim", "switchboard.ai/pd-role": "decode"}),
        true,
        d.port,
    ));
    let kubeconfig = kube.kubeconfig.display().to_string();
    let args = [
        "--pd-disaggregation",
        "--service-discovery",
        "--selector",
        "app=sim",
        "--service-discovery-namespace",
        "default",
    ];
    let gw = support::gateway_env(&[], &args, &[("KUBECONFIG", &kubeconfig)]).await;
    support::ready(&gw).await;
    let r = support::post(
        format!("{}/v1/chat/completions", gw.url),
        &chat("hi there", 3, false),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        support::sim_request_log(&p.sim.url).await.len(),
        1,
        "prefilled on the prefill pod"
    );
    assert_eq!(
        support::sim_request_log(&d.url).await.len(),
        1,
        "decoded on the decode pod"
    );
}
