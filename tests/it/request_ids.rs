//! Request ids: the worker only ever sees the gateway's own rid, so no client can abort another
//! client's generation (SGLang aborts by rid prefix); the client's `x-request-id` is echoed.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, MODEL};

/// The requests a simulator received, oldest first.
async fn worker_log(sim_url: &str) -> Vec<Value> {
    support::client()
        .get(format!("{sim_url}/sim/requests"))
        .send()
        .await
        .expect("log")
        .json()
        .await
        .expect("json")
}

fn is_ours(rid: &str) -> bool {
    rid.len() == 32 && rid.bytes().all(|b| b.is_ascii_hexdigit())
}

fn echoed(r: &reqwest::Response) -> String {
    r.headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .expect("an x-request-id header")
        .to_owned()
}

/// Acceptance: clients that pick one-character `x-request-id`s or `/generate` rids (`""`, `"a"`)
/// and hang up mid-stream end only their own generations; every victim completes.
#[tokio::test]
async fn clients_that_pick_short_ids_and_hang_up_abort_only_their_own_requests() {
    // 20 ms per decode step: 120 tokens keep the victims running for a few seconds.
    let sim = support::sim(&["--decode-base-us", "20000"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let c = support::client();
    let mut victims = Vec::new();
    for i in 0..4 {
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": format!("victim {i}")}],
                          "max_tokens": 120, "stream": true});
        let mut r = c
            .post(format!("{}/v1/chat/completions", gw.url))
            .json(&body)
            .send()
            .await
            .expect("victim");
        assert_eq!(r.status().as_u16(), 200);
        r.chunk()
            .await
            .expect("victim chunk")
            .expect("victim bytes");
        victims.push(tokio::spawn(
            async move { r.text().await.expect("victim body") },
        ));
    }
    let generate = |body: Value| c.post(format!("{}/generate", gw.url)).json(&body).send();
    let mut hostile = Vec::new();
    for id in "0123456789abcdef".chars() {
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                          "max_tokens": 100, "stream": true});
        hostile.push(
            c.post(format!("{}/v1/chat/completions", gw.url))
                .header("x-request-id", id.to_string())
                .json(&body)
                .send()
                .await,
        );
    }
    for rid in ["", "a"] {
        let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 100},
                          "stream": true, "rid": rid});
        hostile.push(generate(body).await);
    }
    for r in hostile {
        let mut r = r.expect("hostile request");
        assert_eq!(r.status().as_u16(), 200);
        r.chunk().await.expect("hostile chunk");
        drop(r); // hang up: the gateway aborts this request on the worker
    }
    support::eventually("the 18 hang-ups reached the worker as aborts", || async {
        support::sim_metric(&sim.url, "sim_abort_requests_received_total").await >= 18.0
    })
    .await;
    for v in victims {
        let text = tokio::time::timeout(Duration::from_secs(20), v)
            .await
            .expect("victim finished in time")
            .expect("victim task");
        assert!(
            text.contains("data: [DONE]") && !text.contains("generation_aborted"),
            "a victim was cut: {}",
            &text[text.len().saturating_sub(300)..]
        );
    }
}

/// The worker gets the gateway's rid, never the client's; the client gets its own id back.
#[tokio::test]
async fn the_worker_sees_our_rid_and_the_client_its_own_id() {
    let sim = support::sim(&["--time-scale", "0.01"]).await;
    let gw = support::gateway(&[&sim], &[]).await;
    let c = support::client();
    let chat =
        json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let last_rid =
        || async { worker_log(&sim.url).await.last().expect("a request")["rid"].clone() };

    // A client id: echoed as is; the worker and the response `id` get ours.
    let r = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .header("x-request-id", "client-7")
        .json(&chat)
        .send()
        .await
        .expect("chat");
    assert_eq!(echoed(&r), "client-7");
    let body: Value = r.json().await.expect("json");
    let rid = last_rid().await;
    let rid = rid.as_str().expect("rid");
    assert!(is_ours(rid), "the worker saw {rid:?}");
    assert_eq!(body["id"], format!("chatcmpl-{rid}"));

    // No client id: ours is echoed, the same the worker saw.
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &chat).await;
    let echo = echoed(&r);
    assert!(
        is_ours(&echo) && last_rid().await == echo.as_str(),
        "{echo}"
    );

    // `/generate`: the body's rid is replaced too, whatever it is.
    for rid in [json!("job-7"), json!(""), json!(["a"])] {
        let body =
            json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}, "rid": rid});
        let r = support::post(format!("{}/generate", gw.url), &body).await;
        assert_eq!(r.status().as_u16(), 200, "rid {rid}");
        let echo = echoed(&r);
        assert!(
            is_ours(&echo) && last_rid().await == echo.as_str(),
            "rid {rid}: worker saw {}",
            last_rid().await
        );
    }

    // Errors carry the id too, so a failed request can be found in the logs.
    let r = c
        .post(format!("{}/v1/chat/completions", gw.url))
        .header("x-request-id", "client-8")
        .json(&json!({"model": MODEL, "messages": "not a list"}))
        .send()
        .await
        .expect("bad chat");
    assert_eq!(
        (r.status().as_u16(), echoed(&r)),
        (400, "client-8".to_owned())
    );
}
