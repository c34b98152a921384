//! `--model-path org/name`: tokenizer files come from a Hub (here a fake one on 127.0.0.1 via
//! `HF_ENDPOINT`) into the `HF_HOME` cache, and later from the cache alone; a missing repo, a
//! gated one and an unreachable Hub stop startup with a message naming the repo.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::support::fake_hub::{FakeHub, HubRepo, COMMIT, GRANTED_TOKEN};
use crate::support::{self, repo_path};

const REPO: &str = "test-org/smollm2";
const GATED: &str = "test-org/gated";

/// An empty `HF_HOME`, removed when the test drops it.
fn hf_home(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("sb-hub-{tag}-"))
        .tempdir()
        .unwrap()
}

async fn hub() -> FakeHub {
    let dir = PathBuf::from(repo_path("assets/tokenizers/smollm2-135m-instruct"));
    let repos = HashMap::from([
        (
            REPO.to_owned(),
            HubRepo {
                dir: dir.clone(),
                gated: false,
            },
        ),
        (GATED.to_owned(), HubRepo { dir, gated: true }),
    ]);
    FakeHub::start(repos).await
}

async fn chat_ok(gw: &support::Proc, model: &str) {
    let body =
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    let r = support::post(format!("{}/v1/chat/completions", gw.url), &body).await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.text().await.unwrap_or_default()
    );
}

/// `switchboard serve` that is expected not to start: its exit status and stderr.
async fn serve_fails(model_path: &str, env: Vec<(&'static str, String)>) -> String {
    serve_fails_with(&[], model_path, env).await
}

async fn serve_fails_with(
    extra: &[&str],
    model_path: &str,
    env: Vec<(&'static str, String)>,
) -> String {
    let args: Vec<String> = ["serve", "--port", "0", "--model-path", model_path]
        .into_iter()
        .chain(extra.iter().copied())
        .map(str::to_owned)
        .collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(&args)
            .envs(env)
            .output()
            .unwrap()
    });
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("serve should give up, not hang")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "serve started: {stderr}");
    stderr
}

fn cached(home: &Path, file: &str) -> PathBuf {
    home.join("hub/models--test-org--smollm2/snapshots")
        .join(COMMIT)
        .join(file)
}

#[tokio::test]
async fn repo_id_downloads_into_the_cache_then_serves_offline() {
    let hub = hub().await;
    let home = hf_home("ok");
    let sim = support::sim(&[]).await;
    let env = |endpoint: &str| {
        vec![
            ("HF_ENDPOINT", endpoint.to_owned()),
            ("HF_HOME", home.path().display().to_string()),
        ]
    };
    let online = env(&hub.url);
    let online: Vec<(&str, &str)> = online.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut gw = support::gateway_env(&[&sim], &["--model-path", REPO], &online).await;
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        assert!(
            cached(home.path(), file).exists(),
            "{file} not in the cache"
        );
    }
    let models = support::get_json(&format!("{}/v1/models", gw.url)).await;
    // The repo id is the served name, as SGLang reports it when given the same id.
    assert_eq!(models["data"][0]["id"], REPO, "{models}");
    chat_ok(&gw, REPO).await;
    gw.kill();
    let asked = hub.requests();
    assert!(asked > 0);

    // Offline mode reads the cache only: the Hub, still up, is not asked.
    let mut offline = env(&hub.url);
    offline.push(("HF_HUB_OFFLINE", "1".to_owned()));
    let offline_env: Vec<(&str, &str)> = offline.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut gw = support::gateway_env(&[&sim], &["--model-path", REPO], &offline_env).await;
    chat_ok(&gw, REPO).await;
    gw.kill();
    assert_eq!(hub.requests(), asked, "offline mode asked the Hub");

    // Offline with an empty cache: nothing to load, nothing downloaded, and the message says why.
    let empty = hf_home("offline-empty");
    offline[1].1 = empty.path().display().to_string();
    let err = serve_fails(REPO, offline).await;
    assert!(err.contains(REPO) && err.contains("in the cache"), "{err}");
    assert_eq!(hub.requests(), asked, "offline mode asked the Hub");

    // Online but the Hub is gone, with the repo cached: the cached files still load.
    hub.stop().await;
    let down = env("http://127.0.0.1:1");
    let down: Vec<(&str, &str)> = down.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let gw = support::gateway_env(&[&sim], &["--model-path", REPO], &down).await;
    chat_ok(&gw, REPO).await;
}

#[tokio::test]
async fn missing_gated_and_unreachable_repos_stop_startup_with_the_reason() {
    let hub = hub().await;
    let homes = hf_home("err");
    let env = |token: Option<&str>| {
        let home = homes.path().join(token.unwrap_or("none"));
        let mut env = vec![
            ("HF_ENDPOINT", hub.url.clone()),
            ("HF_HOME", home.display().to_string()),
        ];
        if let Some(t) = token {
            env.push(("HF_TOKEN", t.to_owned()));
        }
        env
    };
    // A missing repo is "not found" whether the Hub answered 401 (no token) or 404.
    for token in [None, Some("hf_any")] {
        let err = serve_fails("test-org/missing", env(token)).await;
        assert!(err.contains("`test-org/missing` not found"), "{err}");
    }
    let err = serve_fails(GATED, env(None)).await;
    assert!(
        err.contains(GATED)
            && err.contains("gated")
            && err.contains("401")
            && err.contains("HF_TOKEN"),
        "{err}"
    );
    let err = serve_fails(GATED, env(Some("hf_wrong"))).await;
    assert!(
        err.contains(GATED) && err.contains("gated") && err.contains("403"),
        "{err}"
    );
    let err = serve_fails_with(&["--tokenizer-revision", "v9"], REPO, env(None)).await;
    assert!(
        err.contains(REPO) && err.contains("no revision `v9`"),
        "{err}"
    );
    let unreachable = hf_home("unreachable");
    let err = serve_fails(
        REPO,
        vec![
            ("HF_ENDPOINT", "http://127.0.0.1:1".into()),
            ("HF_HOME", unreachable.path().display().to_string()),
        ],
    )
    .await;
    assert!(
        err.contains(REPO) && err.contains("cannot be reached"),
        "{err}"
    );

    // HF_TOKEN with access opens the gated repo.
    let granted = env(Some(GRANTED_TOKEN));
    let granted: Vec<(&str, &str)> = granted.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let sim = support::sim(&[]).await;
    let gw = support::gateway_env(&[&sim], &["--model-path", GATED], &granted).await;
    chat_ok(&gw, GATED).await;
}
