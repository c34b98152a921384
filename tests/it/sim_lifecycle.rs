//! A simulated request's life where SGLang has a special case: the prefill-only request
//! (`max_new_tokens: 0`) and an abort that reaches a request 0.5.9 orphaned (a second live
//! request took its rid). docs/simulator.md names the source of each.

use std::time::Duration;

use serde_json::json;

use crate::sim_versions::{events, generate};
use crate::support::{self, sim_busy};

#[tokio::test]
async fn max_new_tokens_zero_is_a_prefill_only_request() {
    for version in ["0.5.9", "0.5.23"] {
        let sim = support::sim(&["--sglang-version", version, "--time-scale", "0.1"]).await;
        let prompt: Vec<u32> = (1..=40).collect();
        let body = |stream| json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": 0}, "stream": stream});
        let (status, text) = generate(&sim.url, body(false)).await;
        assert_eq!(status, 200, "{version}");
        let out: serde_json::Value = serde_json::from_str(&text.expect("body")).expect("json");
        assert_eq!(out["text"], "", "{version}: {out}");
        assert_eq!(out["output_ids"], json!([]), "{version}: {out}");
        let meta = &out["meta_info"];
        assert_eq!(
            meta["finish_reason"],
            json!({"type": "length", "length": 0}),
            "{version}: {out}"
        );
        assert_eq!(
            (
                meta["prompt_tokens"].as_u64(),
                meta["completion_tokens"].as_u64()
            ),
            (Some(40), Some(0)),
            "{version}: {out}"
        );
        // The prefill ran: the prompt is now cached for the next request.
        let (_, streamed) = generate(&sim.url, body(true)).await;
        let streamed = streamed.expect("stream");
        let chunks = events(&streamed);
        let last = chunks.last().expect("a chunk");
        assert_eq!(
            last["meta_info"]["finish_reason"]["type"], "length",
            "{streamed}"
        );
        assert_eq!(last["meta_info"]["completion_tokens"], 0, "{streamed}");
        assert_eq!(last["meta_info"]["cached_tokens"], 39, "{streamed}");
        assert!(streamed.trim_end().ends_with("data: [DONE]"), "{streamed}");
        assert_eq!(sim_busy(&sim.url).await, 0);
    }
}

/// On 0.5.9 a second live request with the same rid orphans the first; `/abort_request` of that
/// rid is passed on (the rid is live: the second's) and the scheduler aborts every request
/// under it, the orphan too: its slot is freed, its client still hears nothing.
#[tokio::test]
async fn an_abort_of_a_0_5_9_orphans_rid_ends_the_orphan_and_its_successor() {
    let sim = support::sim(&["--sglang-version", "0.5.9", "--decode-base-us", "20000"]).await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5000, "ignore_eos": true}, "stream": true, "rid": "same"});
    let mut orphan = support::post(format!("{}/generate", sim.url), &body).await;
    orphan.chunk().await.expect("first chunk");
    let mut second = support::post(format!("{}/generate", sim.url), &body).await;
    second.chunk().await.expect("the second's first chunk");
    support::eventually("both running", || async { sim_busy(&sim.url).await == 2 }).await;
    support::post(
        format!("{}/abort_request", sim.url),
        &json!({"rid": "same"}),
    )
    .await;
    let rest = second.text().await.expect("the second's rest");
    let finish = events(&rest).iter().find_map(|c| {
        c["meta_info"]["finish_reason"]["type"]
            .as_str()
            .map(str::to_owned)
    });
    assert_eq!(finish.as_deref(), Some("abort"), "{rest}");
    support::eventually("the orphan aborted too", || async {
        sim_busy(&sim.url).await == 0
    })
    .await;
    let heard = tokio::time::timeout(Duration::from_millis(300), orphan.chunk()).await;
    assert!(heard.is_err(), "the orphan's client heard {heard:?}");
}

/// The orphan's client leaving makes 0.5.9 abort its rid, which is the second request's now.
#[tokio::test]
async fn a_0_5_9_orphans_client_leaving_aborts_the_rids_new_owner() {
    let sim = support::sim(&["--sglang-version", "0.5.9", "--decode-base-us", "20000"]).await;
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5000, "ignore_eos": true}, "stream": true, "rid": "same"});
    let mut orphan = support::post(format!("{}/generate", sim.url), &body).await;
    orphan.chunk().await.expect("first chunk");
    let mut second = support::post(format!("{}/generate", sim.url), &body).await;
    second.chunk().await.expect("the second's first chunk");
    drop(orphan);
    let rest = tokio::time::timeout(Duration::from_secs(10), second.text())
        .await
        .expect("the second ends")
        .expect("the second's rest");
    assert!(rest.contains("\"abort\""), "{rest}");
    support::eventually("idle", || async { sim_busy(&sim.url).await == 0 }).await;
}
