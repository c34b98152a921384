//! The served model name: without `--served-model-name` it is the id the workers report on
//! `/v1/models` (what a client that talked to SGLang directly sends), with the tokenizer folder's
//! name still accepted; with the flag, only the flag's.

use serde_json::{json, Value};

use crate::support::{client, gateway, get_json, repo_path, sim, Proc};

/// What SGLang reports when started with `--model-path /models/Qwen2.5-0.5B-Instruct`.
const WORKER_ID: &str = "/models/Qwen2.5-0.5B-Instruct";
const FOLDER: &str = "qwen2.5-0.5b-instruct";

async fn chat(gw: &Proc, model: &str) -> (u16, Value) {
    let resp = client()
        .post(format!("{}/v1/chat/completions", gw.url))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn listed(gw: &Proc) -> Vec<String> {
    let v = get_json(&format!("{}/v1/models", gw.url)).await;
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn qwen_sim() -> Proc {
    let tokenizer = repo_path(&format!("assets/tokenizers/{FOLDER}"));
    sim(&["--model-name", WORKER_ID, "--tokenizer-path", &tokenizer]).await
}

#[tokio::test]
async fn without_a_flag_the_workers_model_id_is_served_and_the_folder_name_still_works() {
    let worker = qwen_sim().await;
    let tokenizer = repo_path(&format!("assets/tokenizers/{FOLDER}"));
    let gw = gateway(&[&worker], &["--model-path", &tokenizer]).await;
    assert_eq!(listed(&gw).await, [WORKER_ID]);
    let (status, body) = chat(&gw, WORKER_ID).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], WORKER_ID);
    let (status, body) = chat(&gw, FOLDER).await;
    assert_eq!(status, 200, "the folder's name is an alias: {body}");
    let (status, body) = chat(&gw, "some-other-model").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "model_not_found");
}

#[tokio::test]
async fn the_flag_wins_over_the_workers() {
    let worker = qwen_sim().await;
    let tokenizer = repo_path(&format!("assets/tokenizers/{FOLDER}"));
    let gw = gateway(
        &[&worker],
        &["--model-path", &tokenizer, "--served-model-name", "qwen"],
    )
    .await;
    assert_eq!(listed(&gw).await, ["qwen"]);
    assert_eq!(chat(&gw, "qwen").await.0, 200);
    assert_eq!(chat(&gw, WORKER_ID).await.0, 404);
    assert_eq!(chat(&gw, FOLDER).await.0, 404);
}
