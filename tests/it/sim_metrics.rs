//! The simulator's `/metrics` as SGLang serves it: only with `--enable-metrics`, SGLang's labels
//! per version, counters that move when a request ends, and load gauges that change only when
//! the scheduler logs its stats (docs/simulator.md names the sources).

use serde_json::json;

use crate::sim_versions::generate;
use crate::support::{self, metric_sum, metrics_text, sim_busy};

const MODEL_LABEL: &str = "model_name=\"smollm2-135m-instruct\"";

#[tokio::test]
async fn metrics_are_served_only_with_enable_metrics() {
    let bare = support::bare_sim(&["--zero-latency"]).await;
    let r = support::client()
        .get(format!("{}/metrics", bare.url))
        .send()
        .await
        .expect("metrics");
    assert_eq!(r.status().as_u16(), 404);
    let with = support::bare_sim(&["--zero-latency", "--enable-metrics"]).await;
    assert!(metrics_text(&with.url)
        .await
        .contains("sglang:num_running_reqs"));
}

#[tokio::test]
async fn labels_follow_each_version() {
    for version in ["0.5.9", "0.5.23"] {
        let sim = support::sim(&["--sglang-version", version, "--zero-latency"]).await;
        let prompt: Vec<u32> = (1..=20).collect();
        for stream in [false, false, true] {
            let body = json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 2}, "stream": stream});
            assert_eq!(generate(&sim.url, body).await.0, 200);
        }
        let text = metrics_text(&sim.url).await;
        let scheduler = format!("sglang:num_running_reqs{{engine_type=\"unified\",{MODEL_LABEL},moe_ep_rank=\"0\",pp_rank=\"0\",tp_rank=\"0\"}}");
        assert!(text.contains(&scheduler), "{version}:\n{text}");
        let cached = if version == "0.5.9" {
            format!("sglang:cached_tokens_total{{cache_source=\"total\",{MODEL_LABEL}}}")
        } else {
            format!("sglang:cached_tokens_total{{cache_source=\"total\",engine_type=\"unified\",{MODEL_LABEL}}}")
        };
        assert!(text.contains(&cached), "{version}:\n{text}");
        let series = |streaming: &str| {
            if version == "0.5.9" {
                format!("sglang:num_requests_total{{{MODEL_LABEL}}}")
            } else {
                format!("sglang:num_requests_total{{engine_type=\"unified\",is_streaming=\"{streaming}\",{MODEL_LABEL}}}")
            }
        };
        if version == "0.5.9" {
            assert_eq!(support::metric(&text, &series("")), Some(3.0), "{text}");
        } else {
            assert_eq!(
                support::metric(&text, &series("false")),
                Some(2.0),
                "{text}"
            );
            assert_eq!(support::metric(&text, &series("true")), Some(1.0), "{text}");
        }
    }
}

#[tokio::test]
async fn counters_move_when_a_request_ends() {
    for version in ["0.5.9", "0.5.23"] {
        let sim = support::sim(&["--sglang-version", version, "--decode-base-us", "20000"]).await;
        let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 20, "ignore_eos": true}, "stream": true});
        let mut r = support::post(format!("{}/generate", sim.url), &body).await;
        r.chunk().await.expect("first chunk");
        let text = metrics_text(&sim.url).await;
        for name in [
            "sglang:num_requests_total",
            "sglang:generation_tokens_total",
            "sglang:prompt_tokens_total",
            "sglang:e2e_request_latency_seconds_count",
        ] {
            assert_eq!(
                metric_sum(&text, name),
                0.0,
                "{version}: {name} while running:\n{text}"
            );
        }
        assert!(r.text().await.expect("rest").contains("[DONE]"));
        support::eventually("counted at its end", || async {
            let text = metrics_text(&sim.url).await;
            metric_sum(&text, "sglang:num_requests_total") == 1.0
                && metric_sum(&text, "sglang:generation_tokens_total") == 20.0
                && metric_sum(&text, "sglang:prompt_tokens_total") == 3.0
        })
        .await;
    }
}

/// After a short request, 0.5.9's running gauge keeps the prefill batch's figure (its idle check
/// reports only every 30 s); 0.5.23's idle check reports at once when it disagrees.
#[tokio::test]
async fn load_gauges_hold_the_last_report() {
    for (version, running_after) in [("0.5.9", 1.0), ("0.5.23", 0.0)] {
        let sim = support::sim(&["--sglang-version", version, "--decode-base-us", "5000"]).await;
        let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5, "ignore_eos": true}});
        assert_eq!(generate(&sim.url, body).await.0, 200);
        assert_eq!(sim_busy(&sim.url).await, 0, "/v1/loads is live");
        let text = metrics_text(&sim.url).await;
        assert_eq!(
            metric_sum(&text, "sglang:num_running_reqs"),
            running_after,
            "{version}:\n{text}"
        );
    }
}

/// `cache_hit_rate` is the last prefill batch's hit tokens over its prompt tokens, not a
/// lifetime ratio.
#[tokio::test]
async fn cache_hit_rate_is_the_last_prefill_batchs() {
    for version in ["0.5.9", "0.5.23"] {
        let sim = support::sim(&["--sglang-version", version, "--time-scale", "0.1"]).await;
        let once = |start: u32| json!({"input_ids": (start..start + 40).collect::<Vec<u32>>(), "sampling_params": {"max_new_tokens": 1}});
        let rate = || async { metric_sum(&metrics_text(&sim.url).await, "sglang:cache_hit_rate") };
        assert_eq!(generate(&sim.url, once(100)).await.0, 200);
        assert_eq!(rate().await, 0.0, "{version}: cold");
        assert_eq!(generate(&sim.url, once(100)).await.0, 200);
        assert_eq!(
            rate().await,
            39.0 / 40.0,
            "{version}: the repeat hits all but its last token"
        );
        assert_eq!(generate(&sim.url, once(500)).await.0, 200);
        assert_eq!(rate().await, 0.0, "{version}: a fresh prompt");
    }
}
