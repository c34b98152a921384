//! Starting the gateway: tokenizer, workers, policy, metrics, listeners.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::relay::Relay;
use crate::routing::Router;
use crate::server::limits::Limits;
use crate::server::{self, AppState};
use crate::tokenize::Tokenizer;
use crate::upstream::Client;
use crate::workers::{health, kv_events, load_poll, Registry};

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
}

pub struct Gateway {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub state: Arc<AppState>,
    pub task: tokio::task::JoinHandle<()>,
}

pub fn build_state(config: ServeConfig) -> Result<AppState, StartError> {
    let (mut tokenizer, default_name) = match &config.model_path {
        Some(dir) => {
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| dir.display().to_string());
            (Tokenizer::from_dir(dir)?, name)
        }
        None => (
            crate::bundled::tokenizer()?,
            crate::bundled::MODEL_NAME.to_owned(),
        ),
    };
    if let Some(path) = &config.chat_template {
        let source = std::fs::read_to_string(path).map_err(|source| StartError::ChatTemplate {
            path: path.display().to_string(),
            source,
        })?;
        tokenizer = tokenizer.with_chat_template(source)?;
    }
    let name: Arc<str> = config
        .served_model_name
        .clone()
        .unwrap_or(default_name)
        .into();
    let context_length = config
        .context_length
        .or(tokenizer.model_max_length())
        .unwrap_or(32768);
    let model = Model {
        name,
        tokenizer: Arc::new(tokenizer),
        context_length,
        reasoning_parser: config.reasoning_parser,
        tool_call_parser: config.tool_call_parser,
    };
    let metrics = Arc::new(Metrics::new(
        prometheus::Registry::new(),
        &model.name,
        &config.routing.policy.name(),
    )?);
    let client = Client::new(
        Duration::from_secs(config.reliability.connect_timeout_secs.max(1)),
        config.worker_tls().config()?,
    );
    let kv_index = kv_index(&config.routing);
    let router = Arc::new(
        Router::new(
            Arc::new(Registry::new(&config.worker_urls)?),
            crate::routing::build_with_kv_index(&config.routing, kv_index.clone()),
            Arc::clone(&metrics),
            client.clone(),
        )
        .with_kv_index(kv_index),
    );
    let relay = Arc::new(Relay {
        router: Arc::clone(&router),
        client,
        metrics: Arc::clone(&metrics),
        tokenizer: Arc::clone(&model.tokenizer),
        reliability: config.reliability.clone(),
        request_timeout_secs: config.request_timeout_secs,
        shutdown: tokio::sync::watch::channel(false).0,
    });
    Ok(AppState {
        limits: Limits::new(&config, model.context_length),
        model,
        router,
        relay,
        metrics,
        draining: tokio::sync::watch::channel(false).0,
        config,
    })
}

/// The exact index for prefix-aware policies, unless `--kv-events off`: filled only for
/// workers that advertise a publisher, so it costs nothing without them.
fn kv_index(cfg: &crate::routing::RoutingConfig) -> Option<Arc<kv_events::KvIndex>> {
    use crate::routing::{KvEventsMode, PolicyKind};
    let prefix_aware = matches!(cfg.policy, PolicyKind::PrefixCost | PolicyKind::CacheAware);
    (prefix_aware && cfg.kv_events == KvEventsMode::Auto).then(|| {
        let page = usize::try_from(cfg.prefix_page_size).unwrap_or(16);
        Arc::new(kv_events::KvIndex::new(page, cfg.kv_events_max_blocks))
    })
}

/// Binds the listeners and serves in the background; health checks start at once.
pub async fn start(mut config: ServeConfig) -> Result<Gateway, StartError> {
    fetch_hub_tokenizer(&mut config).await?;
    let state = Arc::new(build_state(config)?);
    let c = &state.config;
    let registry = state.router.registry();
    let client = &state.relay.client;
    health::spawn(
        Arc::clone(registry),
        client.clone(),
        Duration::from_secs(c.health_check_interval_secs.max(1)),
    );
    if c.load_poll_interval_ms > 0 {
        load_poll::spawn(
            Arc::clone(registry),
            client.clone(),
            Duration::from_millis(c.load_poll_interval_ms),
        );
    }
    if let Some(index) = state.router.kv_index() {
        let settings = kv_events::subscriber::Settings {
            overrides: c.routing.kv_events_endpoints.clone(),
            rebuild: Duration::from_secs(c.routing.kv_events_rebuild_secs),
        };
        let metrics = Arc::new(kv_events::metrics::KvEventMetrics::new(
            state.metrics.registry(),
        )?);
        kv_events::subscriber::spawn(
            Arc::clone(registry),
            client.clone(),
            Arc::clone(index),
            metrics,
            settings,
        );
    }
    if c.discovery.service_discovery {
        let fleet = crate::discovery::reconcile::Fleet {
            router: Arc::clone(&state.router),
            client: client.clone(),
            model: Arc::clone(&state.model.name),
            metrics: Arc::clone(&state.metrics),
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
        let _ = self.state.relay.shutdown.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        // Let the abort requests to workers go out before the runtime stops.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
