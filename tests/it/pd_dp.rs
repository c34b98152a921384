//! PD pairs of data-parallel workers (issue 16): the prefill rank that holds a request's KV must
//! be the one its decode looks on. The sims check it as SGLang does per release (0.5.9: the
//! decode's own named rank, else the room's residue; 0.5.23: `disagg_prefill_dp_rank`, else the
//! residue, and a prefill rank that follows the room refuses another), so a wrong rank fails;
//! the gateway draws the room on the prefill unit's rank and names the fields each release
//! reads, in both legs and on both paths.

use serde_json::{json, Value};

use crate::support::pd::{decode_sim, pd_gateway, prefill_sim, Prefill};
use crate::support::{self, sim_request_log, Proc, MODEL};

/// Short KV timeouts, so a pair that disagrees on the rank fails within the test.
const TIMEOUTS: [&str; 4] = [
    "--disaggregation-waiting-timeout-secs",
    "1",
    "--disaggregation-bootstrap-timeout-secs",
    "1",
];

async fn pair(version: &str) -> (Prefill, Proc) {
    let mut flags = vec![
        "--dp-size",
        "2",
        "--zero-latency",
        "--sglang-version",
        version,
    ];
    flags.extend(TIMEOUTS);
    let p = prefill_sim(&[flags.as_slice(), &["--enable-cache-report"]].concat()).await;
    let d = decode_sim(&flags).await;
    (p, d)
}

/// `/generate` straight to a sim, in the background.
fn generate(sim: &str, body: Value) -> tokio::task::JoinHandle<(u16, Value)> {
    let url = format!("{sim}/generate");
    tokio::spawn(async move {
        let r = support::post(url, &body).await;
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    })
}

fn leg(p: &Prefill, room: u64, fields: Value) -> Value {
    let mut body = json!({"input_ids": (100..164).collect::<Vec<u32>>(),
        "sampling_params": {"max_new_tokens": 2},
        "bootstrap_host": "127.0.0.1", "bootstrap_port": p.bootstrap_port, "bootstrap_room": room});
    if let (Some(map), Some(more)) = (body.as_object_mut(), fields.as_object()) {
        map.extend(more.clone());
    }
    body
}

#[tokio::test]
async fn the_sims_fail_a_pair_that_disagrees_on_the_prefill_rank_as_sglang_does() {
    // 0.5.23: a prefill routed to rank 1 with room 2 (residue 0) and no disagg_prefill_dp_rank.
    let (p, d) = pair("0.5.23").await;
    let pre = generate(&p.sim.url, leg(&p, 2, json!({"routed_dp_rank": 1})));
    let dec = generate(&d.url, leg(&p, 2, json!({"routed_dp_rank": 0})));
    let ((ps, pv), (ds, _)) = (pre.await.unwrap(), dec.await.unwrap());
    assert_eq!(ps, 500, "{pv}");
    assert!(
        pv.to_string().contains("follow_bootstrap_room conflict: dispatched to dp_rank 1 but bootstrap_room 2 implies dp_rank 0"),
        "{pv}"
    );
    assert_eq!(ds, 500);
    // Told on both legs, the same placement works: the decode looks on rank 1.
    let hint = json!({"routed_dp_rank": 1, "disagg_prefill_dp_rank": 1});
    let pre = generate(&p.sim.url, leg(&p, 4, hint.clone()));
    let dec = generate(
        &d.url,
        leg(
            &p,
            4,
            json!({"routed_dp_rank": 0, "disagg_prefill_dp_rank": 1}),
        ),
    );
    let ((ps, pv), (ds, dv)) = (pre.await.unwrap(), dec.await.unwrap());
    assert_eq!((ps, ds), (200, 200), "{pv} {dv}");

    // 0.5.9: the decode's named rank is where it looks, whatever ran the prefill.
    let (p, d) = pair("0.5.9").await;
    let pre = generate(&p.sim.url, leg(&p, 7, json!({"data_parallel_rank": 1})));
    let dec = generate(&d.url, leg(&p, 7, json!({"data_parallel_rank": 0})));
    let ((ps, _), (ds, dv)) = (pre.await.unwrap(), dec.await.unwrap());
    assert_eq!((ps, ds), (500, 500), "{dv}");
    assert!(
        dv.to_string()
            .contains("timed out after 1.0s in KVPoll.WaitingForInput"),
        "{dv}"
    );
    // Unnamed, it looks on the room's residue (7 % 2 = 1), where the prefill ran.
    let pre = generate(&p.sim.url, leg(&p, 9, json!({"data_parallel_rank": 1})));
    let dec = generate(&d.url, leg(&p, 9, json!({})));
    let ((ps, pv), (ds, dv)) = (pre.await.unwrap(), dec.await.unwrap());
    assert_eq!((ps, ds), (200, 200), "{pv} {dv}");
}

fn chat(group: usize, round: usize) -> Value {
    let system = format!("You are assistant number {group}. ").repeat(40);
    json!({"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": format!("question {round}")}]})
}

/// Through the gateway: every request answered by its first pair (no retry), each prefix kept
/// on one prefill rank and reused there.
async fn pd_dp_pairs_agree(version: &str) {
    let (p, d) = pair(version).await;
    let gw = pd_gateway(&[&p], &[&d], &[]).await;
    let mut cached = Vec::new();
    for round in 0..3 {
        for group in 0..4 {
            let r = support::post(
                format!("{}/v1/chat/completions", gw.url),
                &chat(group, round),
            )
            .await;
            assert_eq!(r.status().as_u16(), 200);
            let v: Value = r.json().await.unwrap();
            if round > 0 {
                cached.push(v["usage"]["prompt_tokens_details"]["cached_tokens"].clone());
            }
        }
    }
    // The native path's forwarded bodies too.
    let text = format!(
        "{} and a question",
        "You are assistant number 0. ".repeat(40)
    );
    let body = json!({"text": text, "sampling_params": {"max_new_tokens": 2}});
    let r = support::post(format!("{}/generate", gw.url), &body).await;
    assert_eq!(r.status().as_u16(), 200);
    let prefills = sim_request_log(&p.sim.url).await;
    let decodes = sim_request_log(&d.url).await;
    // A pair that disagreed would have failed and been retried on a new room.
    assert_eq!(prefills.len(), 13, "retried pairs: {prefills:?}");
    assert_eq!(decodes.len(), 13);
    for r in &prefills {
        assert!(
            r["dp_rank"].as_u64().is_some_and(|r| r < 2),
            "no prefill rank named: {r}"
        );
    }
    assert!(
        cached.iter().all(|c| c.as_u64().is_some_and(|c| c > 200)),
        "a prefix missed its prefill rank's cache: {cached:?}"
    );
}

#[tokio::test]
async fn a_pd_pair_of_dp_workers_agrees_on_the_prefill_rank_0_5_23() {
    pd_dp_pairs_agree("0.5.23").await;
}

#[tokio::test]
async fn a_pd_pair_of_dp_workers_agrees_on_the_prefill_rank_0_5_9() {
    pd_dp_pairs_agree("0.5.9").await;
}
