//! `--worker-threads`: how many threads serve requests, one of them meaning a current-thread
//! runtime (also what a process allowed one CPU gets). Every path must work on one thread:
//! streams, and the large bodies parsed and tokenized on the blocking pool meanwhile.

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::support::{self, Proc, MODEL};

/// The `runtime` and `threads` fields of the gateway's "switchboard listening" log line. The
/// log (stderr) is read on its own thread, so the line may arrive after the stdout line that
/// said the gateway listens: it is waited for.
async fn runtime_logged(gw: &Proc) -> (String, u64) {
    let listening = || {
        gw.logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["fields"]["message"] == "switchboard listening")
    };
    support::eventually("the \"switchboard listening\" log line", || {
        let found = listening().is_some();
        async move { found }
    })
    .await;
    let line = listening().unwrap_or_default();
    let fields = &line["fields"];
    (
        fields["runtime"].as_str().unwrap_or_default().to_owned(),
        fields["threads"].as_u64().unwrap_or_default(),
    )
}

#[tokio::test]
async fn one_thread_serves_streams_while_large_bodies_are_tokenized() {
    let sim = support::sim(&[]).await;
    let gw = support::gateway(&[&sim], &["--worker-threads", "1", "--log-json"]).await;
    assert_eq!(runtime_logged(&gw).await, ("CurrentThread".to_owned(), 1));

    // Past 16 KiB a body is parsed, templated and tokenized on the blocking pool.
    let big = "hello world ".repeat(1_500);
    let url = format!("{}/v1/chat/completions", gw.url);
    let large = (0..2).map(|_| {
        let body = json!({"model": MODEL, "max_tokens": 4,
                          "messages": [{"role": "user", "content": big}]});
        let url = url.clone();
        async move { support::post(url, &body).await.status().as_u16() }
    });
    let streams = (0..16).map(|i| support::stream_chat(&gw.url, format!("stream {i}")));
    let (large, streams) = tokio::join!(join_all(large), join_all(streams));
    assert_eq!(large, [200, 200]);
    for s in streams {
        assert_eq!(s, Ok(200));
    }
}

#[tokio::test]
async fn several_threads_on_request_and_zero_refused() {
    let sim = support::sim(&[]).await;
    let gw = support::gateway(&[&sim], &["--worker-threads", "2", "--log-json"]).await;
    assert_eq!(runtime_logged(&gw).await, ("MultiThread".to_owned(), 2));
    assert_eq!(support::stream_chat(&gw.url, "hi".into()).await, Ok(200));

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--port", "0", "--worker-threads", "0"])
        .output()
        .expect("run switchboard");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--worker-threads"), "{err}");
}
