//! Test harness: real `switchboard` processes (simulated workers and the gateway) on
//! 127.0.0.1, killed when dropped; every wait is bounded.

pub mod chunking;
pub mod fake_hub;
pub mod fake_kube;
mod gateway_state;
pub mod llama;
pub mod pd;
pub mod phoenix;
mod process;
pub mod python;
pub mod scripted;
mod sim_state;
pub mod tls;

pub use gateway_state::{all_workers_healthy, gateway_in_flight, get_json, metrics_text, workers};
pub use process::Proc;
use process::{
    start, try_start, GRPC_SIM_LISTENING, SERVE_LISTENING, SERVE_LISTENING_TLS,
    SIM_FLEET_LISTENING, SIM_LISTENING,
};

pub use sim_state::{
    full_sim, sent_to_generate, set_faults, sim_aborted_and_idle, sim_busy, sim_metric,
    sim_request_log,
};

use std::time::{Duration, Instant};

pub const MODEL: &str = "smollm2-135m-instruct";

/// A port that was free a moment ago, for what cannot be told port 0 and asked which port it
/// got: llama-server (the harness cannot verify that the vendored build reports it) and ZMQ
/// endpoints named in a worker's flags. Those keep this race.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// The first of `count` consecutive ports free right now, below the kernel's ephemeral range
/// (32768 and up): the other tests' servers, which bind port 0, and their connections' local
/// ports cannot take one between this check and the bind of the process it is named to.
pub fn free_range(count: u16) -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let span = 12_000 - u32::from(count);
    (0..1000u32)
        .map(|i| 20_000 + ((seed / 7 + i * 7_919) % span) as u16)
        .find(|&first| {
            (first..first + count).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        })
        .expect("free ports below 32768")
}

pub fn repo_path(rel: &str) -> String {
    format!("{}/{}", env!("CARGO_MANIFEST_DIR"), rel)
}

/// Polls `url` until it answers 200, for at most 20 s.
pub async fn wait_ok(url: &str) {
    wait_ok_within(url, Duration::from_secs(20)).await;
}

/// Polls `url` until it answers 200, for at most `limit`.
pub async fn wait_ok_within(url: &str, limit: Duration) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(r) = client.get(url).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} did not become ready");
}

/// Which SGLang release `sim` behaves as when a test does not say: the test matrix runs the
/// suite once per value (docs/testing.md). Unset: the simulator's default (0.5.23).
pub const SIM_VERSION_ENV: &str = "SWITCHBOARD_SIM_SGLANG_VERSION";

/// A simulated SGLang worker with extra flags, with `/metrics` on (`--enable-metrics`, as
/// SGLang serves it only when asked): the tests and the gateway's fallbacks read it.
pub async fn sim(extra: &[&str]) -> Proc {
    let mut with_metrics = vec!["--enable-metrics"];
    with_metrics.extend_from_slice(extra);
    bare_sim(&with_metrics).await
}

/// [`sim`], with a sim that exited before listening (a port taken) as an error.
pub async fn try_sim(extra: &[&str]) -> Result<Proc, String> {
    let mut with_metrics = vec!["--enable-metrics"];
    with_metrics.extend_from_slice(extra);
    try_bare_sim(&with_metrics).await
}

/// [`sim`] without `--enable-metrics` unless `extra` has it: `/metrics` is a 404.
pub async fn bare_sim(extra: &[&str]) -> Proc {
    try_bare_sim(extra)
        .await
        .unwrap_or_else(|e| panic!("switchboard sim {extra:?} {e}"))
}

async fn try_bare_sim(extra: &[&str]) -> Result<Proc, String> {
    let mut args = vec!["sim".to_string(), "--port".into(), "0".into()];
    if !extra.contains(&"--sglang-version") {
        if let Some(v) = std::env::var(SIM_VERSION_ENV)
            .ok()
            .filter(|v| !v.is_empty())
        {
            args.extend(["--sglang-version".into(), v]);
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = try_start(args, &[], SIM_LISTENING).await?;
    wait_ok(&format!("{}/health", p.url)).await;
    Ok(p)
}

/// `count` simulated workers in one process (`sim --ports FIRST-LAST`) and their URLs, all
/// healthy. The range is picked free a moment before (the only way to name one; below the
/// ephemeral ports, where other tests' connections would land); a range taken in between is
/// tried again elsewhere.
pub async fn sim_fleet(count: u16, extra: &[&str]) -> (Proc, Vec<String>) {
    let mut failed = String::new();
    for _ in 0..10 {
        let first = free_range(count);
        let last = first + (count - 1);
        let mut args: Vec<String> = vec!["sim".into(), "--ports".into(), format!("{first}-{last}")];
        args.extend(extra.iter().map(|s| s.to_string()));
        let p = match try_start(args, &[], SIM_FLEET_LISTENING).await {
            Ok(p) => p,
            Err(e) => {
                failed = e;
                continue;
            }
        };
        let urls: Vec<String> = (first..=last)
            .map(|port| format!("http://127.0.0.1:{port}"))
            .collect();
        for url in &urls {
            wait_ok(&format!("{url}/health")).await;
        }
        return (p, urls);
    }
    panic!("no free range of {count} ports for a sim fleet; the last try: {failed}");
}

/// A sim (`--grpc-mode` if `grpc`) with `flags`, publishing KV events at a port found free a
/// moment before (`events(port)` is its `--kv-events-config`): a ZMQ endpoint cannot be port 0,
/// so a port another test's socket took since is given up for another.
pub async fn publishing_sim(grpc: bool, flags: &[&str], events: impl Fn(u16) -> String) -> Proc {
    for _ in 0..10 {
        let config = events(free_port());
        let mut all = flags.to_vec();
        all.extend(["--kv-events-config", config.as_str()]);
        let started = if grpc {
            try_grpc_sim(&all).await
        } else {
            try_sim(&all).await
        };
        if let Ok(sim) = started {
            return sim;
        }
    }
    panic!("no free KV event port in 10 tries ({flags:?})");
}

/// A simulated SGLang worker in `--grpc-mode` with extra flags: `url` is its `grpc://` address
/// (for `--worker-urls`), `metrics_url` its HTTP side port (`/metrics`, `/sim/faults`,
/// `/sim/requests`, `/v1/loads`: what the HTTP helpers read).
pub async fn grpc_sim(extra: &[&str]) -> Proc {
    try_grpc_sim(extra)
        .await
        .unwrap_or_else(|e| panic!("switchboard sim --grpc-mode {extra:?} {e}"))
}

/// [`grpc_sim`], with a sim that exited before listening (a port taken) as an error.
pub async fn try_grpc_sim(extra: &[&str]) -> Result<Proc, String> {
    let mut args: Vec<String> = ["sim", "--grpc-mode", "--enable-metrics", "--port", "0"]
        .map(String::from)
        .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    let p = try_start(args, &[], GRPC_SIM_LISTENING).await?;
    wait_ok(&format!("{}/health", p.http_url())).await;
    Ok(p)
}

/// The gateway in front of `workers`, ready (a healthy worker) before it returns.
pub async fn gateway(workers: &[&Proc], extra: &[&str]) -> Proc {
    gateway_env(workers, extra, &[]).await
}

/// [`gateway`] with extra environment variables.
pub async fn gateway_env(workers: &[&Proc], extra: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut args = vec!["serve".to_string(), "--port".into(), "0".into()];
    if !extra.contains(&"--health-check-interval-secs") {
        args.extend(["--health-check-interval-secs".into(), "1".into()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    if !workers.is_empty() {
        args.push("--worker-urls".into());
        args.extend(workers.iter().map(|w| w.url.clone()));
    }
    let p = start(args, env, SERVE_LISTENING).await;
    if workers.is_empty() {
        wait_ok(&format!("{}/health", p.url)).await;
    } else {
        all_workers_healthy(&p.url).await;
    }
    p
}

/// The gateway with `--tls-cert`/`--tls-key` among `args`, once it printed its `https://`
/// address; readiness is the caller's to check, with a client that trusts its certificate.
pub async fn gateway_https(args: &[&str]) -> Proc {
    let mut all = vec!["serve".to_string(), "--port".into(), "0".into()];
    all.extend(args.iter().map(|s| s.to_string()));
    start(all, &[], SERVE_LISTENING_TLS).await
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// POSTs a JSON body with [`client`]; panics only if nothing answered.
pub async fn post(url: impl reqwest::IntoUrl, body: &serde_json::Value) -> reqwest::Response {
    client().post(url).json(body).send().await.expect("send")
}

/// Reads a Prometheus sample value by its series: a name and the labels to match, e.g.
/// `switchboard_e2e_request_latency_seconds_count{endpoint="chat"}`. A sample matches when it
/// has that name and at least those labels (every series also carries its `model`).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    samples(text, series).next()
}

/// Sum of the samples of a series (name and labels as for [`metric`]); with a name that ends in
/// `{` or is a prefix, every series whose name starts with it.
pub fn metric_sum(text: &str, series: &str) -> f64 {
    samples(text, series).sum()
}

fn samples<'a>(text: &'a str, series: &'a str) -> impl Iterator<Item = f64> + 'a {
    let (name, wanted) = match series.split_once('{') {
        Some((name, labels)) => (name, labels.trim_end_matches('}')),
        None => (series, ""),
    };
    let wanted: Vec<&str> = wanted
        .split("\",")
        .filter(|l| !l.is_empty())
        .map(|l| l.trim_end_matches('"'))
        .collect();
    let exact_name = series.contains('{');
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(move |l| {
            let (head, value) = l.rsplit_once(' ')?;
            let (found, labels) = match head.split_once('{') {
                Some((found, labels)) => (found, labels),
                None => (head, ""),
            };
            let named = if exact_name {
                found == name
            } else {
                found.starts_with(name)
            };
            let labelled = wanted.iter().all(|w| {
                labels
                    .split("\",")
                    .any(|l| l.trim_end_matches(['"', '}']) == *w)
            });
            (named && labelled).then(|| value.parse().ok()).flatten()
        })
}

/// The `data:` payloads of an SSE body, `[DONE]` included.
pub fn sse_data(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// A hand-made worker, for faults the simulator has no knob for: `app` plus a healthy `/health`,
/// served on 127.0.0.1; the task ends with the test's runtime. Returns its base URL.
pub async fn fake_worker(app: axum::Router) -> String {
    let app = app.route("/health", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// Waits until the gateway has a worker that passed its health check (`/readiness` 200).
pub async fn ready(gw: &Proc) {
    eventually("a worker healthy", || async {
        let r = client().get(format!("{}/readiness", gw.url)).send().await;
        matches!(r, Ok(r) if r.status().is_success())
    })
    .await;
}

/// Polls `cond` until it holds, for at most 10 s; panics naming `what` otherwise.
pub async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// A short streamed chat through `gw`: its status, or why it was not a complete stream.
pub async fn stream_chat(gw: &str, content: String) -> Result<u16, String> {
    let body = serde_json::json!({"model": MODEL, "messages": [{"role": "user", "content": content}],
                                  "max_tokens": 8, "stream": true});
    let r = client()
        .post(format!("{gw}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let text = r.text().await.map_err(|e| e.to_string())?;
    if status == 200 && !text.contains("[DONE]") {
        return Err(format!("stream without [DONE]: {text}"));
    }
    Ok(status)
}

/// The joined `delta.content` of a chat SSE body, and whether it ended with `[DONE]`.
pub fn chat_stream_content(body: &str) -> (String, bool) {
    let mut content = String::new();
    let mut done = false;
    for d in sse_data(body) {
        if d == "[DONE]" {
            done = true;
        } else if let Ok(v) = serde_json::from_str::<serde_json::Value>(&d) {
            content.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
        }
    }
    (content, done)
}
