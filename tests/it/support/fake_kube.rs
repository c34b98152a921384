//! A fake Kubernetes API server for discovery tests: pods in one namespace, `list` and `watch`
//! (with equality label selectors and replay from a resourceVersion), on 127.0.0.1. Tests change
//! pods through it and can lose events on purpose, the way a real watch reconnect does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::broadcast;

#[derive(Clone, Debug)]
enum Msg {
    /// A pod changed: its state before and after (None = absent), at a resourceVersion.
    Change {
        rv: u64,
        old: Option<Value>,
        new: Option<Value>,
    },
    /// Close every open watch.
    Drop,
}

#[derive(Default)]
struct Inner {
    pods: BTreeMap<String, Value>,
    rv: u64,
    log: Vec<Msg>,
}

pub struct FakeKube {
    inner: Arc<Mutex<Inner>>,
    tx: broadcast::Sender<Msg>,
    task: tokio::task::JoinHandle<()>,
    /// A kubeconfig file pointing at this server (namespace `default`).
    pub kubeconfig: std::path::PathBuf,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

type AppState = (Arc<Mutex<Inner>>, broadcast::Sender<Msg>);

impl FakeKube {
    pub async fn start() -> FakeKube {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let (tx, _) = broadcast::channel(1024);
        let app = axum::Router::new()
            .route("/api/v1/namespaces/default/pods", axum::routing::get(pods))
            .with_state((Arc::clone(&inner), tx.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake kube");
        let port = listener.local_addr().expect("addr").port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let url = format!("http://127.0.0.1:{port}");
        let kubeconfig = std::env::temp_dir().join(format!("switchboard-kubeconfig-{port}.yaml"));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n\
                 contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
                 current-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
            ),
        )
        .expect("write kubeconfig");
        FakeKube {
            inner,
            tx,
            task,
            kubeconfig,
        }
    }

    /// Creates or replaces a pod, announcing the change to watchers.
    pub fn put(&self, pod: Value) {
        self.change(name_of(&pod), Some(pod), true);
    }

    pub fn delete(&self, name: &str) {
        self.change(name.to_owned(), None, true);
    }

    /// Changes a pod without any watch event, then closes every watch: what a watch that
    /// dropped during the change sees. Only a fresh list shows the change.
    pub fn put_silently(&self, name: &str, pod: Option<Value>) {
        self.change(name.to_owned(), pod, false);
        let _ = self.tx.send(Msg::Drop);
    }

    fn change(&self, name: String, pod: Option<Value>, announce: bool) {
        let mut inner = self.inner.lock().expect("fake kube lock");
        inner.rv += 1;
        let rv = inner.rv;
        let new = pod.map(|mut p| {
            p["metadata"]["resourceVersion"] = json!(rv.to_string());
            p
        });
        let old = match &new {
            Some(p) => inner.pods.insert(name, p.clone()),
            None => inner.pods.remove(&name),
        };
        if announce {
            let msg = Msg::Change { rv, old, new };
            inner.log.push(msg.clone());
            let _ = self.tx.send(msg);
        }
    }
}

fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A pod as SGLang's would look: Running, with `ready` as its Ready condition, at 127.0.0.1
/// and `port` (through the port annotation, since every test worker shares one IP).
pub fn pod(name: &str, labels: Value, ready: bool, port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": labels,
            "annotations": {"switchboard.ai/port": port.to_string()}
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
        }
    })
}

fn selector(query: &HashMap<String, String>) -> Vec<(String, String)> {
    query
        .get("labelSelector")
        .map(|s| {
            s.split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn matches(pod: &Value, sel: &[(String, String)]) -> bool {
    sel.iter()
        .all(|(k, v)| pod["metadata"]["labels"][k].as_str() == Some(v))
}

/// One change as a watcher with this selector sees it: entering the selector is ADDED, leaving
/// it is DELETED (as the real API server reports).
fn watch_line(msg: &Msg, sel: &[(String, String)], since: u64) -> Option<String> {
    let Msg::Change { rv, old, new } = msg else {
        return None;
    };
    if *rv <= since {
        return None;
    }
    let was = old.as_ref().filter(|p| matches(p, sel));
    let is = new.as_ref().filter(|p| matches(p, sel));
    let (kind, object) = match (was, is) {
        (None, Some(p)) => ("ADDED", p.clone()),
        (Some(_), Some(p)) => ("MODIFIED", p.clone()),
        (Some(p), None) => {
            let mut p = p.clone();
            p["metadata"]["resourceVersion"] = json!(rv.to_string());
            ("DELETED", p)
        }
        (None, None) => return None,
    };
    Some(json!({"type": kind, "object": object}).to_string() + "\n")
}

async fn pods(
    State((inner, tx)): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let sel = selector(&query);
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let guard = inner.lock().expect("fake kube lock");
    if !watching {
        let items: Vec<Value> = guard
            .pods
            .values()
            .filter(|p| matches(p, &sel))
            .cloned()
            .collect();
        let body = json!({"apiVersion": "v1", "kind": "PodList",
                          "metadata": {"resourceVersion": guard.rv.to_string()}, "items": items});
        return axum::Json(body).into_response();
    }
    let since: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(guard.rv);
    // Replay what the watcher missed since its list, then follow live changes; subscribing
    // under the lock means no change falls between the two.
    let backlog: Vec<String> = guard
        .log
        .iter()
        .filter_map(|m| watch_line(m, &sel, since))
        .collect();
    let rx = tx.subscribe();
    drop(guard);
    let live = futures_util::stream::unfold(rx, move |mut rx| {
        let sel = sel.clone();
        async move {
            match rx.recv().await {
                Ok(Msg::Drop) | Err(_) => None,
                Ok(msg) => Some((watch_line(&msg, &sel, since).unwrap_or_default(), rx)),
            }
        }
    });
    let lines = futures_util::StreamExt::chain(futures_util::stream::iter(backlog), live);
    let body = Body::from_stream(futures_util::StreamExt::map(
        lines,
        Ok::<_, std::convert::Infallible>,
    ));
    ([("content-type", "application/json")], body).into_response()
}
