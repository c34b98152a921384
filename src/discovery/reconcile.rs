//! Turns pod events into worker-set changes. Only workers this module added are ever removed by
//! it: a URL also given with `--worker-urls` or `POST /workers` stays the operator's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;

use super::config::Rules;
use super::pod::{self, PodState, Role};
use crate::models::{Models, Served};
use crate::routing::Router;
use crate::upstream::{Client, Origin};
use crate::workers::{RegistryError, WorkerId};

const MODEL_QUERY_TIMEOUT: Duration = Duration::from_secs(3);
/// Model checks in flight at once during one list.
const MAX_CONCURRENT_CHECKS: usize = 64;
/// How long one list's model checks may take together: one check's timeout plus a margin for
/// connecting, so the first `MAX_CONCURRENT_CHECKS` always end on their own timeouts.
const CHECKS_DEADLINE: Duration = Duration::from_secs(4);

/// A serving pod whose model has yet to be checked.
struct Unchecked {
    key: String,
    url: String,
    model: Option<String>,
    role: Role,
}

struct Owned {
    url: String,
    id: WorkerId,
    role: Role,
    /// The model whose workers it joined.
    served: Arc<Served>,
}

/// What discovery changes and reads: the models (each with its worker set and the metrics it
/// counts changes in) and the wire client for asking a pod its model.
pub struct Fleet {
    pub models: Arc<Models>,
    pub client: Client,
}

pub struct Reconciler {
    fleet: Fleet,
    rules: Rules,
    owned: HashMap<String, Owned>,
}

impl Reconciler {
    pub fn new(fleet: Fleet, rules: Rules) -> Reconciler {
        Reconciler {
            fleet,
            rules,
            owned: HashMap::new(),
        }
    }

    /// A pod was added or changed.
    pub async fn apply(&mut self, pod: &Pod) {
        self.apply_all(std::slice::from_ref(pod)).await;
    }

    /// A full list: every listed pod applied, then workers whose pods it no longer shows (deleted
    /// while no watch saw it) removed.
    pub async fn relist(&mut self, pods: &[Pod]) {
        let listed: HashSet<String> = pods.iter().map(pod::key).collect();
        self.apply_all(pods).await;
        self.keep_only(&listed);
    }

    async fn apply_all(&mut self, pods: &[Pod]) {
        let mut unchecked = Vec::new();
        for pod in pods {
            let key = pod::key(pod);
            match pod::evaluate(pod, &self.rules) {
                PodState::Excluded(why) => self.remove(&key, &why),
                PodState::Serving { url, model, role } => {
                    if self
                        .owned
                        .get(&key)
                        .is_some_and(|o| o.url == url && o.role == role)
                    {
                        continue;
                    }
                    self.remove(&key, "its address or role changed");
                    unchecked.push(Unchecked {
                        key,
                        url,
                        model,
                        role,
                    });
                }
            }
        }
        // A worker whose model cannot be told is left out and tried again on its next event or
        // re-list, never registered under an unknown model.
        for (pod, verdict) in self.check_models(unchecked).await {
            match verdict {
                Ok(served) => self.add(pod.key, pod.url, pod.role, served),
                Err(why) => {
                    tracing::warn!(pod = %pod.key, url = %pod.url, reason = %why, "pod not added as a worker")
                }
            }
        }
    }

    /// Checks the pods' models together, so that a list with many unresponsive pods takes about
    /// one check timeout, not one per pod (which pushed re-lists past the resync period and left
    /// lost DELETEs unhealed). Checks still running at the deadline are dropped: those pods are
    /// left out until their next event or re-list.
    async fn check_models(
        &self,
        pods: Vec<Unchecked>,
    ) -> Vec<(Unchecked, Result<Arc<Served>, String>)> {
        let total = pods.len();
        let deadline = tokio::time::Instant::now() + CHECKS_DEADLINE;
        let mut checks = futures_util::stream::iter(pods)
            .map(|pod| async move {
                let verdict = self.check_model(&pod.url, pod.model.clone()).await;
                (pod, verdict)
            })
            .buffer_unordered(MAX_CONCURRENT_CHECKS);
        let mut done = Vec::with_capacity(total);
        while let Ok(Some(checked)) = tokio::time::timeout_at(deadline, checks.next()).await {
            done.push(checked);
        }
        if done.len() < total {
            tracing::warn!(
                unchecked = total - done.len(),
                "model checks cut off at their deadline; those pods are tried again on the next re-list"
            );
        }
        done
    }

    pub fn delete(&mut self, pod: &Pod) {
        self.remove(&pod::key(pod), "deleted");
    }

    /// After a full list: pods no longer listed were deleted while no watch saw it.
    fn keep_only(&mut self, listed: &HashSet<String>) {
        let gone: Vec<String> = self
            .owned
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            self.remove(&key, "missing from the latest list");
        }
    }

    fn add(&mut self, key: String, url: String, role: Role, served: Arc<Served>) {
        let Some(router) = router_for(&served, role) else {
            tracing::warn!(pod = %key, %url, "a prefill pod, but the gateway is not in PD mode: not added");
            return;
        };
        if let (Role::Prefill { bootstrap_port }, Some(pool)) = (role, &served.relay.prefill) {
            pool.set_port(&url, bootstrap_port);
        }
        match router.add_worker(&url) {
            Ok(worker) => {
                tracing::info!(pod = %key, %url, id = worker.id.0, model = %served.model.name, "worker added");
                served
                    .metrics()
                    .discovery_changes
                    .with_label_values(&["added"])
                    .inc();
                self.owned.insert(
                    key,
                    Owned {
                        url,
                        id: worker.id,
                        role,
                        served,
                    },
                );
            }
            Err(RegistryError::Duplicate(_)) => {
                tracing::info!(pod = %key, %url, "worker already registered by the operator")
            }
            Err(e) => tracing::warn!(pod = %key, %url, error = %e, "pod not added as a worker"),
        }
    }

    fn remove(&mut self, key: &str, why: &str) {
        let Some(owned) = self.owned.remove(key) else {
            tracing::debug!(pod = %key, reason = %why, "pod is not a worker");
            return;
        };
        let removed =
            router_for(&owned.served, owned.role).and_then(|router| router.remove_worker(owned.id));
        if removed.is_some() {
            tracing::info!(pod = %key, url = %owned.url, reason = %why, "worker removed");
            owned
                .served
                .metrics()
                .discovery_changes
                .with_label_values(&["removed"])
                .inc();
        }
    }

    /// The model a pod's worker joins: the one its declared model (pod label or annotation,
    /// `--model-id-from`) or, without one, the ids it reports itself name.
    async fn check_model(
        &self,
        url: &str,
        declared: Option<String>,
    ) -> Result<Arc<Served>, String> {
        let names = match declared {
            Some(name) => vec![name],
            None => worker_models(&self.fleet.client, url, MODEL_QUERY_TIMEOUT).await?,
        };
        let served = self.fleet.models.for_worker(&names).ok_or_else(|| {
            let ours: Vec<&str> = self.fleet.models.iter().map(|s| &*s.model.name).collect();
            format!("it serves {names:?}, none of {ours:?}")
        })?;
        served.model.learn_name(&names);
        Ok(Arc::clone(served))
    }
}

/// The pool a role's workers join: the prefill pool's router (in PD mode), else the main one.
fn router_for(served: &Served, role: Role) -> Option<&Arc<Router>> {
    match (role, &served.relay.prefill) {
        (Role::Main, _) => Some(served.router()),
        (Role::Prefill { .. }, Some(pool)) => Some(pool.router()),
        (Role::Prefill { .. }, None) => None,
    }
}

/// The model ids a worker reports on `/v1/models` (a gRPC worker: `GetModelInfo`).
pub async fn worker_models(
    client: &Client,
    url: &str,
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let origin = Origin::parse(url)?;
    if origin.is_grpc() {
        let info = crate::upstream::grpc::model_info(client.grpc(), &origin, timeout)
            .await
            .map_err(|e| format!("cannot read its model from GetModelInfo: {e}"))?;
        return Ok([info.served_model_name, info.model_path]
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect());
    }
    let (status, body) = client
        .get(&origin, "/v1/models", timeout)
        .await
        .map_err(|e| format!("cannot read its model from /v1/models: {e}"))?;
    if !status.is_success() {
        return Err(format!("/v1/models answered {status}"));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("/v1/models is not JSON: {e}"))?;
    let ids: Vec<String> = v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect();
    if ids.is_empty() {
        return Err("/v1/models lists no model".into());
    }
    Ok(ids)
}
