//! Several models behind one gateway (`[[models]]` in the config file): requests route by their
//! `model` to that model's workers only; `/v1/models` lists every model; an unknown model is a
//! 404 `model_not_found`; workers added at run time join the model they serve.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::python_clients::{bench_with, SIM_FAST};
use crate::support::{self, repo_path, sim, Proc};

const QWEN: &str = "qwen2.5-0.5b";
const SMOL: &str = "smollm2";

fn tokenizer(folder: &str) -> String {
    repo_path(&format!("assets/tokenizers/{folder}"))
}

async fn qwen_sim(extra: &[&str]) -> Proc {
    let tok = tokenizer("qwen2.5-0.5b-instruct");
    sim(&[
        &[
            "--model-name",
            "Qwen/Qwen2.5-0.5B-Instruct",
            "--tokenizer-path",
            &tok,
        ],
        extra,
    ]
    .concat())
    .await
}

async fn smol_sim(extra: &[&str]) -> Proc {
    let tok = tokenizer("smollm2-135m-instruct");
    sim(&[
        &[
            "--model-name",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "--tokenizer-path",
            &tok,
        ],
        extra,
    ]
    .concat())
    .await
}

/// Two models, two sims each, behind one gateway; Qwen's workers round-robin.
struct Fleet {
    qwen: [Proc; 2],
    smol: [Proc; 2],
    gw: Proc,
}

async fn fleet(sim_flags: &[&str]) -> Fleet {
    let qwen = [qwen_sim(sim_flags).await, qwen_sim(sim_flags).await];
    let smol = [smol_sim(sim_flags).await, smol_sim(sim_flags).await];
    let config = format!(
        r#"health_check_interval_secs = 1

[[models]]
name = "{QWEN}"
aliases = ["qwen"]
tokenizer_path = "{qwen_tok}"
worker_urls = ["{q0}", "{q1}"]
policy = "round_robin"

[[models]]
name = "{SMOL}"
tokenizer_path = "{smol_tok}"
worker_urls = ["{s0}", "{s1}"]
"#,
        qwen_tok = tokenizer("qwen2.5-0.5b-instruct"),
        smol_tok = tokenizer("smollm2-135m-instruct"),
        q0 = qwen[0].url,
        q1 = qwen[1].url,
        s0 = smol[0].url,
        s1 = smol[1].url,
    );
    let path = std::env::temp_dir().join(format!(
        "sb-models-{}-{}.toml",
        std::process::id(),
        qwen[0].port
    ));
    std::fs::write(&path, config).expect("write config");
    let gw = support::gateway(&[], &["--config", path.to_str().expect("utf-8 path")]).await;
    let _ = std::fs::remove_file(&path); // read once, at start-up
    support::all_workers_healthy(&gw.url).await;
    Fleet { qwen, smol, gw }
}

/// The rids a sim received (the gateway's rid, echoed to the client as `x-request-id`).
async fn rids(sims: &[Proc]) -> HashSet<String> {
    let mut all = HashSet::new();
    for s in sims {
        for r in support::sim_request_log(&s.url).await {
            all.insert(r["rid"].as_str().unwrap_or_default().to_owned());
        }
    }
    all
}

/// POSTs `body` to `path`; the answer's status, JSON body and request id.
async fn call(gw: &Proc, path: &str, body: Value) -> (u16, Value, String) {
    let r = support::post(format!("{}{path}", gw.url), &body).await;
    let rid = r.headers()["x-request-id"]
        .to_str()
        .unwrap_or_default()
        .to_owned();
    (
        r.status().as_u16(),
        r.json().await.unwrap_or(Value::Null),
        rid,
    )
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4})
}

#[tokio::test]
async fn each_model_is_served_by_its_own_workers_only() {
    let f = fleet(&[]).await;
    let listed = support::get_json(&format!("{}/v1/models", f.gw.url)).await;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [QWEN, SMOL]);

    let (mut qwen_rids, mut smol_rids) = (HashSet::new(), HashSet::new());
    for (model, answered_as) in [(QWEN, QWEN), ("qwen", QWEN), (SMOL, SMOL)] {
        let into = if answered_as == QWEN {
            &mut qwen_rids
        } else {
            &mut smol_rids
        };
        for _ in 0..3 {
            let (status, body, rid) = call(&f.gw, "/v1/chat/completions", chat(model)).await;
            assert_eq!(status, 200, "{model}: {body}");
            assert_eq!(body["model"], answered_as);
            into.insert(rid);
        }
        let completion = json!({"model": model, "prompt": "one two", "max_tokens": 3});
        let (status, body, rid) = call(&f.gw, "/v1/completions", completion).await;
        assert_eq!(status, 200, "{model}: {body}");
        into.insert(rid);
    }
    // `/generate` names no model in SGLang: an optional `model` picks one here.
    let (status, body, rid) = call(
        &f.gw,
        "/generate",
        json!({"model": SMOL, "text": "hi", "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    smol_rids.insert(rid);

    let (at_qwen, at_smol) = (rids(&f.qwen).await, rids(&f.smol).await);
    assert_eq!(
        at_qwen, qwen_rids,
        "Qwen's workers got Qwen's requests, and only those"
    );
    assert_eq!(
        at_smol, smol_rids,
        "SmolLM2's workers got SmolLM2's requests, and only those"
    );
    for s in &f.qwen {
        assert!(
            !support::sim_request_log(&s.url).await.is_empty(),
            "round robin used both"
        );
    }

    let (status, body, _) = call(&f.gw, "/v1/chat/completions", chat("llama")).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found");
    let messages =
        json!({"model": "llama", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
    let (status, body, _) = call(&f.gw, "/v1/messages", messages).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body["type"], "error",
        "Anthropic's shape on /v1/messages: {body}"
    );
    assert_eq!(body["error"]["type"], "not_found_error");

    // Per-model series under a bounded `model` label: the unknown name is not a label value.
    let text = support::metrics_text(&f.gw.url).await;
    let ok = |model: &str| {
        support::metric(
            &text,
            &format!(
                "switchboard_requests_total{{endpoint=\"chat\",model=\"{model}\",status=\"200\"}}"
            ),
        )
    };
    assert_eq!((ok(QWEN), ok(SMOL)), (Some(6.0), Some(3.0)), "{text}");
    assert!(!text.contains("model=\"llama\""), "{text}");
    assert_eq!(
        support::metric(
            &text,
            "switchboard_requests_total{endpoint=\"chat\",model=\"none\",status=\"404\"}"
        ),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn a_worker_added_at_run_time_joins_the_model_it_serves() {
    let f = fleet(&[]).await;
    let extra = smol_sim(&[]).await;
    let add = |body: Value| {
        let url = format!("{}/workers", f.gw.url);
        async move { support::post(url, &body).await }
    };
    // Asked, it reports SmolLM2's Hub id, which names no model here: it must say which it serves.
    let r = add(json!({"url": extra.url})).await;
    assert_eq!(r.status().as_u16(), 400);
    let r = add(json!({"url": extra.url, "model": "nope"})).await;
    assert_eq!(r.status().as_u16(), 404);
    let r = add(json!({"url": extra.url, "model": SMOL})).await;
    assert_eq!(r.status().as_u16(), 201);
    let added: Value = r.json().await.unwrap();
    assert_eq!(added["model"], SMOL);

    // A worker whose `/v1/models` names a model (here by its path) is asked and joins it.
    let qwen_tok = tokenizer("qwen2.5-0.5b-instruct");
    let named = sim(&[
        "--model-name",
        "/models/qwen2.5-0.5b",
        "--tokenizer-path",
        &qwen_tok,
    ])
    .await;
    let r = add(json!({"url": named.url})).await;
    assert_eq!(r.status().as_u16(), 201);
    let added: Value = r.json().await.unwrap();
    assert_eq!(added["model"], QWEN);
    let list = support::workers(&f.gw.url).await;
    let ids: HashSet<u64> = list["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 6, "worker ids are unique across models: {list}");
}

/// Acceptance: the OpenAI SDK and bench_serving, for each model through the same URL.
#[tokio::test]
async fn openai_sdk_and_bench_serving_for_each_model() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let f = fleet(SIM_FAST).await;
    for (model, folder) in [
        (QWEN, "qwen2.5-0.5b-instruct"),
        (SMOL, "smollm2-135m-instruct"),
    ] {
        let r = support::python::run(
            &py,
            "tests/python/openai_sdk_check.py",
            vec![f.gw.url.clone(), model.into()],
        )
        .await;
        assert_eq!(r["ok"], true, "{model}: {r}");
        let extra = format!("{{\"model\": \"{model}\"}}");
        let args = [
            "--model",
            model,
            "--tokenizer",
            &tokenizer(folder),
            "--extra-request-body",
            &extra,
        ];
        for backend in ["sglang", "sglang-oai", "sglang-oai-chat"] {
            bench_with(&py, &f.gw.url, backend, "random-ids", &args).await;
        }
    }
    // Random ids from Qwen's 151k vocabulary would be refused by SmolLM2's 49k one: every
    // request reached a worker of its own model.
    let (at_qwen, at_smol) = (rids(&f.qwen).await, rids(&f.smol).await);
    assert!(at_qwen.is_disjoint(&at_smol));
}

/// One model whose name was not settled at start-up (no flag, no worker to ask): a worker added
/// later is asked, and the id it reports is accepted from then on.
#[tokio::test]
async fn a_late_worker_is_asked_for_its_model_id() {
    let gw = support::gateway(&[], &[]).await;
    let worker = sim(&["--model-name", "/models/SmolLM2-135M-Instruct"]).await;
    let r = support::post(format!("{}/workers", gw.url), &json!({"url": worker.url})).await;
    assert_eq!(r.status().as_u16(), 201);
    support::ready(&gw).await;
    support::eventually("the worker's model id is accepted", || async {
        call(
            &gw,
            "/v1/chat/completions",
            chat("/models/SmolLM2-135M-Instruct"),
        )
        .await
        .0 == 200
    })
    .await;
    let (status, _, _) = call(&gw, "/v1/chat/completions", chat(support::MODEL)).await;
    assert_eq!(status, 200, "the tokenizer folder's name still serves");
}
