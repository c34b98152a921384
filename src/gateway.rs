//! Starting the gateway: tokenizer, workers, policy, metrics, listeners.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::relay::Relay;
use crate::routing::{PolicyKind, Router};
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
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

pub struct Gateway {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub state: Arc<AppState>,
    pub task: tokio::task::JoinHandle<()>,
}

pub fn build_state(config: ServeConfig) -> Result<AppState, StartError> {
    let default_name = default_model_name(&config);
    let mut tokenizer = match &config.model_path {
        Some(dir) => Tokenizer::from_dir(dir)?,
        None => crate::bundled::tokenizer()?,
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
        .unwrap_or_else(|| default_name.clone())
        .into();
    // A name learned from the workers (see `learn_served_name`) leaves the folder's accepted.
    let aliases = if config.served_model_name_from_workers && *name != *default_name {
        vec![Arc::from(default_name)]
    } else {
        Vec::new()
    };
    let context_length = config
        .context_length
        .or(tokenizer.model_max_length())
        .unwrap_or(32768);
    // Not given: the parser the chat template (or the model's name) calls for.
    let path = config.model_path.as_ref().map(|p| p.display().to_string());
    let names: Vec<&str> = [Some(&*name), path.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let tool_call_parser = config
        .tool_call_parser
        .or_else(|| crate::tool_calls::detect::detect(tokenizer.tool_template_source(), &names));
    if config.tool_call_parser.is_none() {
        if let Some(kind) = tool_call_parser {
            tracing::info!(
                parser = kind.name(),
                "tool-call parser detected from the model"
            );
        }
    }
    let model = Model {
        name,
        aliases,
        tokenizer: Arc::new(tokenizer),
        context_length,
        reasoning_parser: config.reasoning_parser,
        tool_call_parser,
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
    let pd = &config.pd;
    // PD: the main pool holds the decode workers (whose answers the clients get).
    let (worker_urls, main_routing) = if pd.pd_disaggregation {
        let mut routing = config.routing.clone();
        routing.policy = pd.decode_policy.unwrap_or(PolicyKind::PowerOfTwo);
        (pd.decode.clone(), routing)
    } else {
        (config.worker_urls.clone(), config.routing.clone())
    };
    let kv_index = kv_index(&main_routing);
    let router = Arc::new(
        Router::new(
            Arc::new(Registry::new(&worker_urls)?),
            crate::routing::build_with_kv_index(&main_routing, kv_index.clone()),
            Arc::clone(&metrics),
            client.clone(),
        )
        .with_kv_index(kv_index),
    );
    let prefill = match pd.pd_disaggregation {
        true => Some(Arc::new(prefill_pool(&config, &metrics, &client)?)),
        false => None,
    };
    let relay = Arc::new(Relay {
        router: Arc::clone(&router),
        prefill,
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
    learn_served_name(&mut config).await?;
    let state = Arc::new(build_state(config)?);
    let c = &state.config;
    let registry = state.router.registry();
    let client = &state.relay.client;
    health::spawn(
        Arc::clone(registry),
        client.clone(),
        Duration::from_secs(c.health_check_interval_secs.max(1)),
    );
    let mut registries = vec![Arc::clone(registry)];
    if let Some(pool) = &state.relay.prefill {
        let prefill = Arc::clone(pool.router().registry());
        health::spawn(
            Arc::clone(&prefill),
            client.clone(),
            Duration::from_secs(c.health_check_interval_secs.max(1)),
        );
        registries.push(prefill);
    }
    if c.load_poll_interval_ms > 0 {
        for registry in registries {
            load_poll::spawn(
                registry,
                client.clone(),
                Duration::from_millis(c.load_poll_interval_ms),
            );
        }
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
            prefill: state.relay.prefill.clone(),
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

/// The name served when neither the flag nor the workers give one: the tokenizer folder's
/// (bundled: SmolLM2's).
fn default_model_name(config: &ServeConfig) -> String {
    match &config.model_path {
        Some(dir) => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string()),
        None => crate::bundled::MODEL_NAME.to_owned(),
    }
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
        let _ = self.state.relay.shutdown.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        // Let the abort requests to workers go out before the runtime stops.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// PD: the prefill pool, its own registry and policy (default `--policy`: cache-aware).
fn prefill_pool(
    config: &ServeConfig,
    metrics: &Arc<Metrics>,
    client: &Client,
) -> Result<crate::routing::pd::PrefillPool, StartError> {
    let workers = config
        .pd
        .prefill_workers()
        .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e)))?;
    let urls: Vec<String> = workers.iter().map(|(url, _)| url.clone()).collect();
    let mut routing = config.routing.clone();
    routing.policy = config.pd.prefill_policy.unwrap_or(config.routing.policy);
    let router = Arc::new(Router::new(
        Arc::new(Registry::new(&urls)?),
        crate::routing::build(&routing),
        Arc::clone(metrics),
        client.clone(),
    ));
    Ok(crate::routing::pd::PrefillPool::new(
        router,
        workers.into_iter().collect(),
    ))
}
