//! The watch loop: list + watch pods through kube-rs, restarted with a fresh list every resync
//! period so that events lost during a reconnect cannot leave a stale worker behind.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;

use super::config::{DiscoveryConfig, Rules};
use super::reconcile::{Fleet, Reconciler};

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("service discovery: {0}")]
    Flags(String),
    #[error("service discovery: no Kubernetes credentials (in-cluster or KUBECONFIG): {0}")]
    Credentials(String),
}

/// Connects to the API server (in-cluster service account, or KUBECONFIG) and starts following
/// the pods in the background.
pub async fn spawn(fleet: Fleet, config: &DiscoveryConfig) -> Result<(), DiscoveryError> {
    let rules = config.rules().map_err(DiscoveryError::Flags)?;
    let kube_config = kube::Config::infer()
        .await
        .map_err(|e| DiscoveryError::Credentials(e.to_string()))?;
    let client = kube::Client::try_from(kube_config)
        .map_err(|e| DiscoveryError::Credentials(e.to_string()))?;
    let pods: Api<Pod> = match &config.service_discovery_namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::default_namespaced(client),
    };
    let resync = Duration::from_secs(config.service_discovery_resync_secs.max(1));
    tracing::info!(selector = %DiscoveryConfig::label_selector(&rules), resync_secs = resync.as_secs(), "service discovery on");
    tokio::spawn(follow(
        pods,
        Reconciler::new(fleet, rules.clone()),
        rules,
        resync,
    ));
    Ok(())
}

async fn follow(pods: Api<Pod>, mut reconciler: Reconciler, rules: Rules, resync: Duration) {
    let watch_config = watcher::Config::default().labels(&DiscoveryConfig::label_selector(&rules));
    loop {
        // A new watcher starts with a full list (Init … InitDone).
        let mut events = watcher::watcher(pods.clone(), watch_config.clone())
            .default_backoff()
            .boxed();
        let relist = tokio::time::sleep(resync);
        tokio::pin!(relist);
        // The pods of the list in progress, applied together once it is complete.
        let mut listing: Option<Vec<Pod>> = None;
        loop {
            let event = tokio::select! {
                _ = &mut relist => break,
                event = events.next() => event,
            };
            match event {
                Some(Ok(Event::Init)) => listing = Some(Vec::new()),
                Some(Ok(Event::InitApply(p))) => match listing.as_mut() {
                    Some(pods) => pods.push(p),
                    None => reconciler.apply(&p).await,
                },
                Some(Ok(Event::InitDone)) => {
                    if let Some(pods) = listing.take() {
                        reconciler.relist(&pods).await;
                    }
                }
                Some(Ok(Event::Apply(p))) => reconciler.apply(&p).await,
                Some(Ok(Event::Delete(p))) => reconciler.delete(&p),
                // The watcher recovers on its own (with backoff); workers stay as they are
                // until the API server answers again.
                Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying"),
                None => break,
            }
        }
    }
}
