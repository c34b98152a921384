//! KV events (issue 15): the simulator publishes what SGLang publishes, and the gateway routes on
//! what workers publish — checked against SGLang's own code (tests/python/kv_events_oracle.py:
//! its `KVEventBatch` decoder, hash functions and `ZmqEventPublisher`). Faults: `kv_event_faults`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{self, Proc};

const PAGE: usize = 16;

fn sim_flags() -> Vec<&'static str> {
    vec!["--page-size", "16", "--zero-latency"]
}

/// `n` (up to 400) tokens unique to `seed`; 100 tokens are 6 whole pages and a partial one.
pub(crate) fn prompt(seed: u32, n: u32) -> Vec<u32> {
    (0..n).map(|t| 100 + seed * 400 + t).collect()
}

/// SGLang's `ZmqEventPublisher`, driven line by line (`publish` in the oracle script).
pub(crate) struct Publisher {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Publisher {
    /// SGLang's publisher on ports found free a moment before (a ZMQ endpoint cannot be port 0):
    /// a port another test took in between is given up for others. The ports it bound, too.
    pub(crate) fn start_free(py: &str, with_replay: bool) -> (Publisher, u16, Option<u16>) {
        for _ in 0..10 {
            let port = support::free_port();
            let replay = with_replay.then(support::free_port);
            if let Some(publisher) = Publisher::try_start(py, port, replay) {
                return (publisher, port, replay);
            }
        }
        panic!("no free ports for the publisher in 10 tries");
    }

    /// SGLang's publisher on these ports (a restarted engine's, on its predecessor's).
    pub(crate) fn start(py: &str, port: u16, replay: Option<u16>) -> Publisher {
        Publisher::try_start(py, port, replay)
            .unwrap_or_else(|| panic!("the publisher could not bind {port} / {replay:?}"))
    }

    /// None when it exits before it is ready (its `bind` raises on a taken port).
    fn try_start(py: &str, port: u16, replay: Option<u16>) -> Option<Publisher> {
        let mut child = Command::new(py)
            .arg(support::repo_path("tests/python/kv_events_oracle.py"))
            .args(["publish", &format!("tcp://*:{port}")])
            .arg(replay.map_or(String::new(), |r| format!("tcp://*:{r}")))
            .arg(PAGE.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the publisher");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let publisher = Publisher {
            child,
            stdin,
            stdout,
        };
        // Dropping it kills the process.
        line.contains("ready").then_some(publisher)
    }

    pub(crate) fn cmd(&mut self, cmd: Value) {
        writeln!(self.stdin, "{cmd}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(line.contains("ok"), "publisher: {line:?}");
    }

    pub(crate) fn store(&mut self, prompts: &[Vec<u32>]) {
        self.cmd(json!({"op": "store", "prompts": prompts}));
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) async fn generate(gw: &Proc, ids: &[u32]) {
    let r = support::post(
        format!("{}/generate", gw.url),
        &json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

pub(crate) async fn received(sim: &Proc, ids: &[u32]) -> bool {
    support::sim_request_log(&sim.url)
        .await
        .iter()
        .any(|r| r["input_ids"] == json!(ids))
}

pub(crate) async fn metric(gw: &Proc, series: &str) -> f64 {
    support::metric(&support::metrics_text(&gw.url).await, series).unwrap_or(0.0)
}

pub(crate) async fn blocks(gw: &Proc, sim: &Proc) -> f64 {
    metric(
        gw,
        &format!("switchboard_kv_index_blocks{{worker=\"{}\"}}", sim.url),
    )
    .await
}

pub(crate) async fn wait_subscribed(gw: &Proc) {
    support::eventually("the gateway subscribed", || async {
        gw.logs().contains("kv events: subscribed")
    })
    .await;
    // The subscription reaches the publisher a moment after the connection.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Two workers; only `b`'s events come from SGLang's publisher on `port` (and `replay`), named
/// by the override flag.
pub(crate) async fn fleet_with_publisher(
    port: u16,
    replay: Option<u16>,
    extra: &[&str],
) -> (Proc, Proc, Proc) {
    let a = support::sim(&sim_flags()).await;
    let b = support::sim(&sim_flags()).await;
    let mut over = format!("{}=tcp://127.0.0.1:{port}", b.url);
    if let Some(r) = replay {
        over.push_str(&format!(",tcp://127.0.0.1:{r}"));
    }
    let mut flags = vec!["--kv-events-endpoint", over.as_str()];
    flags.extend_from_slice(extra);
    let gw = support::gateway(&[&a, &b], &flags).await;
    (a, b, gw)
}

#[tokio::test]
async fn every_sim_batch_decodes_with_sglangs_decoder_and_hashes() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    for version in ["0.5.9", "0.5.23"] {
        // The config the sim took (the last one tried) and its two ports.
        let chosen = std::cell::RefCell::new((String::new(), 0, 0));
        let mut flags = sim_flags();
        flags.extend(["--kv-capacity-tokens", "1024", "--sglang-version", version]);
        let sim = support::publishing_sim(false, &flags, |port| {
            let replay = support::free_port();
            let cfg = json!({"publisher": "zmq", "endpoint": format!("tcp://127.0.0.1:{port}"),
                "replay_endpoint": format!("tcp://127.0.0.1:{replay}"), "bind": true})
            .to_string();
            *chosen.borrow_mut() = (cfg.clone(), port, replay);
            cfg
        })
        .await;
        let (cfg, port, replay) = chosen.into_inner();
        let info = support::get_json(&format!("{}/server_info", sim.url)).await;
        assert_eq!(info["kv_events_config"], json!(cfg));
        let summary = support::python::run(
            &py,
            "tests/python/kv_events_oracle.py",
            vec![
                "check".into(),
                sim.url.clone(),
                format!("tcp://127.0.0.1:{port}"),
                format!("tcp://127.0.0.1:{replay}"),
                version.into(),
            ],
        )
        .await;
        // Pages were stored, evicted and cleared, and all were SGLang's.
        assert!(
            summary["blocks"].as_u64().unwrap() > 64,
            "{version}: {summary}"
        );
        assert!(
            summary["removed"].as_u64().unwrap() > 0,
            "{version}: {summary}"
        );
        assert_eq!(summary["cleared"], 1, "{version}: {summary}");
    }
}

#[tokio::test]
async fn sglangs_publisher_steers_routing() {
    let Some(py) = support::python::interpreter() else {
        return;
    };
    let (mut publisher, port, _) = Publisher::start_free(&py, false);
    let (a, b, gw) = fleet_with_publisher(port, None, &[]).await;
    wait_subscribed(&gw).await;
    let hot: Vec<Vec<u32>> = (0..4).map(|i| prompt(i, 100)).collect();
    publisher.store(&hot);
    support::eventually("b's blocks indexed", || async {
        blocks(&gw, &b).await == 24.0
    })
    .await;
    for p in &hot {
        generate(&gw, p).await;
        assert!(received(&b, p).await, "a prompt b holds went elsewhere");
    }
    // Prompts nobody holds still spread: the events, not a bias, sent the others to b.
    for i in 10..14 {
        generate(&gw, &prompt(i, 100)).await;
    }
    let mut on_a = 0;
    for i in 10..14 {
        on_a += usize::from(received(&a, &prompt(i, 100)).await);
    }
    assert!(on_a > 0, "cold prompts all went to b");
}

#[tokio::test]
async fn sim_events_make_predictions_exact() {
    let cfg =
        |port: u16| json!({"publisher": "zmq", "endpoint": format!("tcp://*:{port}")}).to_string();
    let a = support::publishing_sim(false, &sim_flags(), cfg).await;
    let b = support::publishing_sim(false, &sim_flags(), cfg).await;
    let gw = support::gateway(&[&a, &b], &[]).await;
    support::eventually("both subscribed", || async {
        gw.logs().matches("kv events: subscribed").count() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Counted as each batch is applied (the blocks gauge is refreshed only every second).
    let indexed = || async {
        let text = support::metrics_text(&gw.url).await;
        support::metric_sum(&text, "switchboard_kv_events_total")
    };
    let mut events = 0.0;
    for round in 0..3 {
        for group in 0..4 {
            // A shared 100-token head, then a question of its own.
            let mut ids = prompt(group, 100);
            ids.extend(prompt(50 + round * 4 + group, 21));
            generate(&gw, &ids).await;
            // The next request of this group is routed on these events: they must have arrived
            // (each request stores at least its own question's page).
            support::eventually("the request's events applied", || async {
                indexed().await > events
            })
            .await;
            events = indexed().await;
        }
    }
    support::eventually("blocks indexed", || async {
        let text = support::metrics_text(&gw.url).await;
        support::metric_sum(&text, "switchboard_kv_index_blocks") > 0.0
    })
    .await;
    // The engines drop their caches behind the gateway's back: a guess from routing history
    // would now predict hits; the events say nothing is cached.
    for sim in [&a, &b] {
        support::post(format!("{}/flush_cache", sim.url), &json!({})).await;
    }
    support::eventually("the views cleared", || async {
        let text = support::metrics_text(&gw.url).await;
        support::metric_sum(&text, "switchboard_kv_index_blocks") == 0.0
    })
    .await;
    for group in 0..4 {
        let mut ids = prompt(group, 100);
        ids.extend(prompt(60 + group, 21));
        generate(&gw, &ids).await;
    }
    let text = support::metrics_text(&gw.url).await;
    // Every request's prediction was what the worker then reported.
    let count = support::metric_sum(&text, "switchboard_cache_prediction_error_tokens_count");
    let sum = support::metric_sum(&text, "switchboard_cache_prediction_error_tokens_sum");
    assert_eq!((count, sum), (16.0, 0.0), "{text}");
}

/// gRPC workers (issue 17): the same events reach the index over `SubscribeKvEvents`. `b`'s
/// engine caches prompts the gateway never sent it (through its HTTP side port); only the
/// events can send them to `b`. A flush clears the view (`AllBlocksCleared` over gRPC).
#[tokio::test]
async fn grpc_workers_events_steer_routing() {
    let cfg = |port: u16| {
        json!({"publisher": "zmq", "endpoint": format!("tcp://127.0.0.1:{port}"), "bind": true})
            .to_string()
    };
    let a = support::publishing_sim(true, &sim_flags(), cfg).await;
    let b = support::publishing_sim(true, &sim_flags(), cfg).await;
    let gw = support::gateway(&[&a, &b], &[]).await;
    support::eventually("both subscribed", || async {
        gw.logs().matches("kv events: subscribed").count() == 2
    })
    .await;
    let hot: Vec<Vec<u32>> = (0..4).map(|i| prompt(i, 100)).collect();
    for p in &hot {
        let r = support::post(
            format!("{}/generate", b.http_url()),
            &json!({"input_ids": p, "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    support::eventually("b's blocks indexed", || async {
        blocks(&gw, &b).await == 24.0
    })
    .await;
    let on = |sim: &Proc, ids: &[u32]| {
        let (url, ids) = (sim.http_url().to_owned(), json!(ids));
        async move {
            support::sim_request_log(&url)
                .await
                .iter()
                .filter(|r| r["input_ids"] == ids)
                .count()
        }
    };
    for p in &hot {
        generate(&gw, p).await;
        assert_eq!(on(&b, p).await, 2, "a prompt b holds went elsewhere");
    }
    // Prompts nobody holds still spread: the events, not a bias, sent the others to b.
    let mut on_a = 0;
    for i in 10..14 {
        generate(&gw, &prompt(i, 100)).await;
        on_a += on(&a, &prompt(i, 100)).await;
    }
    assert!(on_a > 0, "cold prompts all went to b");
    support::eventually("the gateway's requests finished on b", || async {
        support::sim_metric(b.http_url(), "sglang:num_running_reqs").await == 0.0
    })
    .await;
    support::post(format!("{}/flush_cache", b.http_url()), &json!({})).await;
    support::eventually("b's view cleared", || async {
        blocks(&gw, &b).await == 0.0
    })
    .await;
}
