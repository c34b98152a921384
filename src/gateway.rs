//! Starting the gateway: tokenizers, workers, policies, metrics (`build`), background tasks,
//! listeners.

mod build;

pub use build::build_state;
use build::default_model_name;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::ServeConfig;
use crate::server::{self, AppState};
use crate::upstream::Client;
use crate::workers::{health, kv_events, load_poll};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Hub(#[from] crate::hub::HubError),
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenize::TokenizeError),
    #[error("cannot read chat template {path}: {source}")]
    ChatTemplate {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Workers(#[from] crate::workers::RegistryError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error(transparent)]
    Bind(#[from] crate::net::BindError),
    #[error(transparent)]
    Tls(#[from] crate::net::tls::TlsError),
    #[error(transparent)]
    Discovery(#[from] crate::discovery::watch::DiscoveryError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

pub struct Gateway {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub state: Arc<AppState>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds the listeners and serves in the background; health checks start at once.
pub async fn start(mut config: ServeConfig) -> Result<Gateway, StartError> {
    fetch_hub_tokenizer(&mut config).await?;
    fetch_hub_tokenizers(&mut config).await?;
    learn_served_name(&mut config).await?;
    let state = Arc::new(build_state(config)?);
    spawn_background(&state)?;
    let c = &state.config;
    if c.discovery.service_discovery {
        let fleet = crate::discovery::reconcile::Fleet {
            models: Arc::clone(&state.models),
            client: state.client.clone(),
        };
        crate::discovery::watch::spawn(fleet, &c.discovery).await?;
    }
    let tls = match (&c.tls_cert, &c.tls_key) {
        (Some(cert), Some(key)) => Some(crate::net::tls::server_config(cert, key)?),
        _ => None,
    };
    let (tcp, local) = crate::net::bind(&c.host, c.port).await?;
    let metrics_addr = match c.prometheus_port {
        Some(port) => {
            let (tcp, local) = crate::net::bind(&c.prometheus_host, port).await?;
            let app = axum::Router::new()
                .route("/metrics", axum::routing::get(server::info::metrics))
                .with_state(Arc::clone(&state));
            tokio::spawn(async move {
                let _ = axum::serve(crate::net::Listener::new(tcp), app).await;
            });
            Some(local)
        }
        None => None,
    };
    let app = server::router(Arc::clone(&state));
    let mut draining = state.draining.subscribe();
    let task = tokio::spawn(async move {
        let stop = async move {
            let _ = draining.wait_for(|d| *d).await;
        };
        // Connection info gives the per-client rate limit its key for clients without a token.
        let app = app.into_make_service_with_connect_info::<crate::net::ClientAddr>();
        let listener = crate::net::Listener::new(tcp);
        let served = match tls {
            Some(tls) => {
                let listener = crate::net::tls::TlsListener::new(listener, local, tls);
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop)
                    .await
            }
            None => {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop)
                    .await
            }
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "gateway server stopped");
        }
    });
    Ok(Gateway {
        addr: local,
        metrics_addr,
        state,
        task,
    })
}

/// Every model's health checks, load polls and KV-event subscriptions.
fn spawn_background(state: &AppState) -> Result<(), StartError> {
    let c = &state.config;
    let client = &state.client;
    let health_interval = Duration::from_secs(c.health_check_interval_secs.max(1));
    // Registered once, shared by every model's subscriptions.
    let mut kv_metrics = None;
    for served in state.models.iter() {
        let router = served.router();
        let mut registries = vec![Arc::clone(router.registry())];
        if let Some(pool) = &served.relay.prefill {
            registries.push(Arc::clone(pool.router().registry()));
        }
        for registry in &registries {
            registry.route_dp_ranks(!c.disable_dp_routing);
            health::spawn(Arc::clone(registry), client.clone(), health_interval);
            if c.load_poll_interval_ms > 0 {
                let every = Duration::from_millis(c.load_poll_interval_ms);
                load_poll::spawn(Arc::clone(registry), client.clone(), every);
            }
        }
        if let Some(index) = router.kv_index() {
            let settings = kv_events::subscriber::Settings {
                overrides: c.routing.kv_events_endpoints.clone(),
                rebuild: Duration::from_secs(c.routing.kv_events_rebuild_secs),
            };
            let metrics = match &kv_metrics {
                Some(m) => Arc::clone(m),
                None => {
                    let m = Arc::new(kv_events::metrics::KvEventMetrics::new(
                        state.metrics.registry(),
                    )?);
                    kv_metrics.insert(m).clone()
                }
            };
            kv_events::subscriber::spawn(
                Arc::clone(router.registry()),
                client.clone(),
                Arc::clone(index),
                metrics,
                settings,
            );
        }
    }
    Ok(())
}

/// A Hub repo id in `--model-path` becomes the snapshot folder its files were downloaded to; the
/// served name defaults to the repo id, which is what SGLang reports when given the same id.
async fn fetch_hub_tokenizer(config: &mut ServeConfig) -> Result<(), StartError> {
    let Some(repo) = config
        .model_path
        .as_deref()
        .and_then(crate::hub::RepoId::from_model_path)
    else {
        return Ok(());
    };
    let dir = crate::hub::fetch(&repo, &config.tokenizer_revision).await?;
    tracing::info!(repo = repo.as_str(), revision = %config.tokenizer_revision, dir = %dir.display(), "tokenizer from the Hub cache");
    config
        .served_model_name
        .get_or_insert_with(|| repo.as_str().to_owned());
    config.model_path = Some(dir);
    Ok(())
}

/// The same for each `[[models]]` entry's `tokenizer_path` (its name is its own).
async fn fetch_hub_tokenizers(config: &mut ServeConfig) -> Result<(), StartError> {
    for spec in &mut config.models {
        let Some(repo) = spec
            .tokenizer_path
            .as_deref()
            .and_then(crate::hub::RepoId::from_model_path)
        else {
            continue;
        };
        let dir = crate::hub::fetch(&repo, &spec.tokenizer_revision).await?;
        tracing::info!(model = %spec.name, repo = repo.as_str(), dir = %dir.display(), "tokenizer from the Hub cache");
        spec.tokenizer_path = Some(dir);
    }
    Ok(())
}

/// How long start-up waits for the workers to say which model they serve.
const MODEL_QUERY_LIMIT: Duration = Duration::from_secs(5);

/// Without `--served-model-name`, the served name is the model id the workers report on
/// `/v1/models` (as SMG and vLLM's router do): a client that talked to SGLang directly sends
/// that id (bench_serving sends the model path) and keeps working through the gateway. The
/// first worker to answer decides; if none answers within [`MODEL_QUERY_LIMIT`], the tokenizer
/// folder's name serves, as before.
async fn learn_served_name(config: &mut ServeConfig) -> Result<(), StartError> {
    if config.served_model_name.is_some() || config.worker_urls.is_empty() {
        return Ok(());
    }
    let client = Client::new(
        Duration::from_secs(config.reliability.connect_timeout_secs.max(1)),
        config.worker_tls().config()?,
    );
    let mut asks = tokio::task::JoinSet::new();
    for url in &config.worker_urls {
        let Ok(origin) = crate::upstream::Origin::parse(url) else {
            continue;
        };
        let client = client.clone();
        asks.spawn(async move { worker_model_id(&client, &origin).await });
    }
    let first = tokio::time::timeout(MODEL_QUERY_LIMIT, async {
        while let Some(answer) = asks.join_next().await {
            if let Ok(Some(id)) = answer {
                return Some(id);
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    match first {
        Some(id) => {
            tracing::info!(model = %id, "served model name from the workers' /v1/models");
            config.served_model_name = Some(id);
            config.served_model_name_from_workers = true;
        }
        None => tracing::warn!(
            model = %default_model_name(config),
            "no worker reported its model id at start-up; serving the tokenizer's name (set --served-model-name to choose)"
        ),
    }
    Ok(())
}

/// The first model id a worker lists on `/v1/models`, if it answers with one.
async fn worker_model_id(client: &Client, worker: &crate::upstream::Origin) -> Option<String> {
    let (status, body) = client
        .get(worker, "/v1/models", MODEL_QUERY_LIMIT)
        .await
        .ok()?;
    if !status.is_success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    v["data"][0]["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

impl Gateway {
    /// Graceful shutdown: readiness turns 503 and no new connections are accepted; requests
    /// in flight get `grace` to finish, then the rest are ended (with an error event) and
    /// aborted on their workers.
    pub async fn drain(mut self, grace: Duration) {
        let _ = self.state.draining.send(true);
        tracing::info!(grace_secs = grace.as_secs(), "draining");
        if tokio::time::timeout(grace, &mut self.task).await.is_ok() {
            return;
        }
        tracing::warn!("grace period over: ending the requests still in flight");
        let _ = self.state.shutdown.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        // Let the abort requests to workers go out before the runtime stops.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
