//! Kubernetes service discovery against a fake API server (list + watch on 127.0.0.1): pods
//! become workers only while Ready, leave on NotReady, termination, deletion or relabelling, a
//! lost event heals on the next re-list, and requests keep flowing while pods churn.

use crate::support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::fake_kube::{pod, FakeKube};
use crate::support::{Proc, MODEL};
use axum::routing::get;
use serde_json::{json, Value};

async fn gateway(kube: &FakeKube, extra: &[&str]) -> Proc {
    let mut args = vec![
        "--service-discovery",
        "--selector",
        "app=sim",
        "--service-discovery-namespace",
        "default",
    ];
    args.extend_from_slice(extra);
    let kubeconfig = kube.kubeconfig.display().to_string();
    support::gateway_env(&[], &args, &[("KUBECONFIG", &kubeconfig)]).await
}

/// The URLs the gateway currently routes to (healthy or not).
async fn worker_urls(gw: &str) -> BTreeSet<String> {
    let v = support::workers(gw).await;
    v["workers"]
        .as_array()
        .unwrap_or_else(|| panic!("no workers list in {v}"))
        .iter()
        .filter_map(|w| w["url"].as_str().map(str::to_owned))
        .collect()
}

async fn expect_workers(gw: &str, want: &[&Proc], what: &str) {
    let want: BTreeSet<String> = want.iter().map(|p| p.url.clone()).collect();
    support::eventually(what, || {
        let want = want.clone();
        async move { worker_urls(gw).await == want }
    })
    .await;
}

async fn chat(gw: &str) -> Result<(), String> {
    match support::stream_chat(gw, "hi".into()).await? {
        200 => Ok(()),
        status => Err(format!("status {status}")),
    }
}

async fn changes(gw: &str, change: &str) -> f64 {
    let text = support::metrics_text(gw).await;
    support::metric(
        &text,
        &format!("switchboard_discovery_changes_total{{change=\"{change}\"}}"),
    )
    .unwrap_or(0.0)
}

fn labels() -> Value {
    json!({"app": "sim"})
}

#[tokio::test]
async fn pods_are_workers_only_while_ready() {
    let kube = FakeKube::start().await;
    let (a, b) = (support::sim(&[]).await, support::sim(&[]).await);
    kube.put(pod("a", labels(), true, a.port));
    kube.put(pod("b", labels(), false, b.port));
    let gw = gateway(&kube, &[]).await;
    expect_workers(
        &gw.url,
        &[&a],
        "the Ready pod is a worker, the unready one is not",
    )
    .await;
    support::wait_ok(&format!("{}/readiness", gw.url)).await;
    chat(&gw.url)
        .await
        .expect("request through a discovered worker");

    kube.put(pod("b", labels(), true, b.port));
    expect_workers(&gw.url, &[&a, &b], "b joins once Ready").await;
    kube.put(pod("a", labels(), false, a.port));
    expect_workers(&gw.url, &[&b], "a leaves when NotReady").await;
    kube.put(pod("a", labels(), true, a.port));
    expect_workers(&gw.url, &[&a, &b], "a is back when Ready again").await;

    let mut terminating = pod("b", labels(), true, b.port);
    terminating["metadata"]["deletionTimestamp"] = json!("2026-11-21T00:00:00Z");
    kube.put(terminating);
    expect_workers(
        &gw.url,
        &[&a],
        "a terminating pod leaves although still Ready",
    )
    .await;
    kube.delete("a");
    expect_workers(&gw.url, &[], "a deleted pod leaves").await;
    assert_eq!(changes(&gw.url, "added").await, 3.0);
    assert_eq!(changes(&gw.url, "removed").await, 3.0);
}

#[tokio::test]
async fn relabelled_pods_leave_and_join_the_selector() {
    let kube = FakeKube::start().await;
    let (a, b) = (support::sim(&[]).await, support::sim(&[]).await);
    kube.put(pod("a", labels(), true, a.port));
    kube.put(pod("b", json!({"app": "other"}), true, b.port));
    let gw = gateway(&kube, &[]).await;
    expect_workers(&gw.url, &[&a], "only the pod matching the selector").await;
    kube.put(pod("a", json!({"app": "other"}), true, a.port));
    kube.put(pod("b", labels(), true, b.port));
    expect_workers(&gw.url, &[&b], "a relabelled out, b relabelled in").await;
}

#[tokio::test]
async fn a_lost_watch_event_heals_on_the_next_relist() {
    let kube = FakeKube::start().await;
    let (a, b, c) = (
        support::sim(&[]).await,
        support::sim(&[]).await,
        support::sim(&[]).await,
    );
    kube.put(pod("a", labels(), true, a.port));
    kube.put(pod("b", labels(), true, b.port));
    let gw = gateway(&kube, &["--service-discovery-resync-secs", "2"]).await;
    expect_workers(&gw.url, &[&a, &b], "both pods").await;
    // b is deleted and c created while the watch is down: no event ever reports either.
    kube.put_silently("b", None);
    kube.put_silently("c", Some(pod("c", labels(), true, c.port)));
    expect_workers(&gw.url, &[&a, &c], "the re-list drops b and finds c").await;
}

/// Twenty pods whose workers never answer `/v1/models` (issue 14, defect 9): their model checks
/// run together, so a re-list takes about one check timeout (3 s) and a lost DELETE still heals.
/// Checked one at a time, each list took 20 × 3 s and no re-list came within the wait.
#[tokio::test]
async fn unresponsive_pods_do_not_starve_the_relist() {
    let kube = FakeKube::start().await;
    let (a, b) = (support::sim(&[]).await, support::sim(&[]).await);
    kube.put(pod("a", labels(), true, a.port));
    kube.put(pod("b", labels(), true, b.port));
    let silent = get(std::future::pending::<()>);
    for i in 0..20 {
        let url =
            support::fake_worker(axum::Router::new().route("/v1/models", silent.clone())).await;
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        kube.put(pod(&format!("silent-{i:02}"), labels(), true, port));
    }
    let gw = gateway(&kube, &["--service-discovery-resync-secs", "1"]).await;
    expect_workers(
        &gw.url,
        &[&a, &b],
        "both answering pods, none of the silent ones",
    )
    .await;
    kube.put_silently("b", None);
    expect_workers(&gw.url, &[&a], "the re-list drops b").await;
}

#[tokio::test]
async fn the_model_comes_from_a_label_or_the_worker_never_unknown() {
    let kube = FakeKube::start().await;
    let ours = support::sim(&[]).await;
    let other = support::sim(&["--model-name", "llama-3-8b"]).await;
    kube.put(pod(
        "ours",
        json!({"app": "sim", "model": MODEL}),
        true,
        ours.port,
    ));
    kube.put(pod(
        "mislabelled",
        json!({"app": "sim", "model": "llama-3-8b"}),
        true,
        other.port,
    ));
    kube.put(pod("unlabelled", labels(), true, other.port));

    // From the worker's own /v1/models: `other` serves another model, so neither of its pods
    // is a worker.
    let by_worker = gateway(&kube, &[]).await;
    expect_workers(
        &by_worker.url,
        &[&ours],
        "only the worker serving our model",
    )
    .await;

    // From a label: a pod without the label is left out rather than added as "unknown".
    let by_label = gateway(&kube, &["--model-id-from", "label:model"]).await;
    expect_workers(
        &by_label.url,
        &[&ours],
        "only the pod labelled with our model",
    )
    .await;
}

#[tokio::test]
async fn requests_keep_flowing_while_pods_churn() {
    let kube = FakeKube::start().await;
    let sims = [
        support::sim(&[]).await,
        support::sim(&[]).await,
        support::sim(&[]).await,
    ];
    let names = ["a", "b", "c"];
    for (name, sim) in names.iter().zip(&sims) {
        kube.put(pod(name, labels(), true, sim.port));
    }
    let gw = gateway(&kube, &[]).await;
    expect_workers(&gw.url, &[&sims[0], &sims[1], &sims[2]], "all three pods").await;
    support::wait_ok(&format!("{}/readiness", gw.url)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (url, stop, sent) = (gw.url.clone(), Arc::clone(&stop), Arc::clone(&sent));
        clients.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            // Bounded: the churn below ends long before 10,000 requests.
            for _ in 0..10_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Err(e) = chat(&url).await {
                    failures.push(e);
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            failures
        }));
    }
    // Each pod in turn goes NotReady, comes back, is deleted and re-created; one pod is
    // always serving.
    for (i, name) in names.iter().enumerate() {
        let others: Vec<&Proc> = sims
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| s)
            .collect();
        let all: Vec<&Proc> = sims.iter().collect();
        kube.put(pod(name, labels(), false, sims[i].port));
        expect_workers(&gw.url, &others, "pod drained on NotReady").await;
        kube.put(pod(name, labels(), true, sims[i].port));
        expect_workers(&gw.url, &all, "pod back").await;
        kube.delete(name);
        expect_workers(&gw.url, &others, "pod removed on delete").await;
        kube.put(pod(name, labels(), true, sims[i].port));
        expect_workers(&gw.url, &all, "pod re-created").await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.expect("client task"));
    }
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent >= 20, "only {sent} requests ran during the churn");
    assert!(
        failures.is_empty(),
        "{} of {sent} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}
