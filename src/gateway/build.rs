//! The state the gateway serves from: its models — each a tokenizer, workers, a policy and its
//! own metrics label — and what they share (the wire client, the metrics registry, worker ids,
//! the shutdown signal). One model from the flags, or one per `[[models]]` entry.

use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::StartError;
use crate::config::models::ModelSpec;
use crate::config::ServeConfig;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::models::{Models, Served};
use crate::relay::Relay;
use crate::routing::{PolicyKind, Router, RoutingConfig};
use crate::server::limits::Limits;
use crate::server::AppState;
use crate::tokenize::Tokenizer;
use crate::tool_calls::ParserKind;
use crate::upstream::Client;
use crate::workers::{kv_events, Registry};

/// What every model's relay shares.
struct Shared {
    registry: prometheus::Registry,
    client: Client,
    worker_ids: Arc<AtomicU32>,
    shutdown: tokio::sync::watch::Sender<bool>,
}

pub fn build_state(config: ServeConfig) -> Result<AppState, StartError> {
    let shared = Shared {
        registry: prometheus::Registry::new(),
        client: Client::new(
            Duration::from_secs(config.reliability.connect_timeout_secs.max(1)),
            config.worker_tls().config()?,
        ),
        worker_ids: Arc::new(AtomicU32::new(0)),
        shutdown: tokio::sync::watch::channel(false).0,
    };
    let models = match config.models.split_first() {
        None => Models::new(flag_model(&config, &shared)?, Vec::new()),
        Some((first, others)) => Models::new(
            configured_model(first, &config, &shared)?,
            others
                .iter()
                .map(|spec| configured_model(spec, &config, &shared))
                .collect::<Result<_, _>>()?,
        ),
    };
    // One model: its metrics are the gateway's, as they always were. Several: what cannot be
    // charged to one of them (refused before its lookup) counts under `model="none"`.
    let metrics = match models.len() {
        1 => Arc::clone(models.default_model().metrics()),
        _ => Arc::new(Metrics::new(
            shared.registry.clone(),
            crate::metrics::UNROUTED,
            &config.routing.policy.name(),
        )?),
    };
    let longest_context = models
        .iter()
        .map(|s| s.model.context_length)
        .max()
        .unwrap_or(32768);
    Ok(AppState {
        limits: Limits::new(&config, longest_context),
        models: Arc::new(models),
        client: shared.client,
        metrics,
        shutdown: shared.shutdown,
        draining: tokio::sync::watch::channel(false).0,
        config,
    })
}

/// The one model of a gateway without `[[models]]`: `--model-path`, `--served-model-name`, …
fn flag_model(config: &ServeConfig, shared: &Shared) -> Result<Served, StartError> {
    let default_name = default_model_name(config);
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
    let tokenizer = tokenizer(
        config.model_path.as_deref(),
        config.chat_template.as_deref(),
    )?;
    let parser = tool_call_parser(
        config.tool_call_parser,
        &tokenizer,
        &name,
        config.model_path.as_deref(),
    );
    let model = Model {
        name,
        aliases,
        context_length: context_length(config.context_length, &tokenizer),
        tool_call_parser: parser,
        tokenizer: Arc::new(tokenizer),
        reasoning_parser: config.reasoning_parser,
        // Neither the flag nor a worker named it: a worker added later may.
        late_name: config.served_model_name.is_none().then(OnceLock::new),
    };
    let pd = &config.pd;
    // PD: the main pool holds the decode workers (whose answers the clients get).
    let (worker_urls, routing) = if pd.pd_disaggregation {
        let mut routing = config.routing.clone();
        routing.policy = pd.decode_policy.unwrap_or(PolicyKind::PowerOfTwo);
        (pd.decode.clone(), routing)
    } else {
        (config.worker_urls.clone(), config.routing.clone())
    };
    serve(model, &worker_urls, &routing, config, shared)
}

/// A `[[models]]` entry.
fn configured_model(
    spec: &ModelSpec,
    config: &ServeConfig,
    shared: &Shared,
) -> Result<Served, StartError> {
    let tokenizer = tokenizer(
        spec.tokenizer_path.as_deref(),
        spec.chat_template.as_deref(),
    )?;
    let model = Model {
        name: spec.name.as_str().into(),
        aliases: spec.aliases.iter().map(|a| a.as_str().into()).collect(),
        context_length: context_length(spec.context_length, &tokenizer),
        tool_call_parser: tool_call_parser(
            spec.tool_call_parser,
            &tokenizer,
            &spec.name,
            spec.tokenizer_path.as_deref(),
        ),
        tokenizer: Arc::new(tokenizer),
        reasoning_parser: spec.reasoning_parser,
        late_name: None,
    };
    serve(model, &spec.worker_urls, &spec.routing, config, shared)
}

/// A model with its workers, policy, indexes and metrics: what requests for it are served by.
fn serve(
    model: Model,
    worker_urls: &[String],
    routing: &RoutingConfig,
    config: &ServeConfig,
    shared: &Shared,
) -> Result<Served, StartError> {
    let metrics = Arc::new(Metrics::new(
        shared.registry.clone(),
        &model.name,
        &routing.policy.name(),
    )?);
    let kv_index = kv_index(routing);
    let registry = Registry::sharing_ids(worker_urls, Arc::clone(&shared.worker_ids))?;
    let router = Arc::new(
        Router::new(
            Arc::new(registry),
            crate::routing::build_with_kv_index(routing, kv_index.clone()),
            Arc::clone(&metrics),
            shared.client.clone(),
        )
        .with_kv_index(kv_index),
    );
    let prefill = match config.pd.pd_disaggregation {
        true => Some(Arc::new(prefill_pool(config, &metrics, shared)?)),
        false => None,
    };
    let relay = Arc::new(Relay {
        router,
        prefill,
        client: shared.client.clone(),
        metrics,
        tokenizer: Arc::clone(&model.tokenizer),
        reliability: config.reliability.clone(),
        request_timeout_secs: config.request_timeout_secs,
        shutdown: shared.shutdown.clone(),
    });
    Ok(Served { model, relay })
}

fn tokenizer(dir: Option<&Path>, chat_template: Option<&Path>) -> Result<Tokenizer, StartError> {
    let tokenizer = match dir {
        Some(dir) => Tokenizer::from_dir(dir)?,
        None => crate::bundled::tokenizer()?,
    };
    let Some(path) = chat_template else {
        return Ok(tokenizer);
    };
    let source = std::fs::read_to_string(path).map_err(|source| StartError::ChatTemplate {
        path: path.display().to_string(),
        source,
    })?;
    Ok(tokenizer.with_chat_template(source)?)
}

/// Not given: the parser the chat template (or the model's name or path) calls for.
fn tool_call_parser(
    given: Option<ParserKind>,
    tokenizer: &Tokenizer,
    name: &str,
    path: Option<&Path>,
) -> Option<ParserKind> {
    if given.is_some() {
        return given;
    }
    let path = path.map(|p| p.display().to_string());
    let names: Vec<&str> = [Some(name), path.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    let detected = crate::tool_calls::detect::detect(tokenizer.tool_template_source(), &names);
    if let Some(kind) = detected {
        tracing::info!(
            model = name,
            parser = kind.name(),
            "tool-call parser detected from the model"
        );
    }
    detected
}

fn context_length(given: Option<usize>, tokenizer: &Tokenizer) -> usize {
    given.or(tokenizer.model_max_length()).unwrap_or(32768)
}

/// The name served when neither the flag nor the workers give one: the tokenizer folder's
/// (bundled: SmolLM2's).
pub(super) fn default_model_name(config: &ServeConfig) -> String {
    match &config.model_path {
        Some(dir) => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string()),
        None => crate::bundled::MODEL_NAME.to_owned(),
    }
}

/// The exact index for prefix-aware policies, unless `--kv-events off`: filled only for
/// workers that advertise a publisher, so it costs nothing without them.
fn kv_index(cfg: &RoutingConfig) -> Option<Arc<kv_events::KvIndex>> {
    use crate::routing::KvEventsMode;
    let prefix_aware = matches!(cfg.policy, PolicyKind::PrefixCost | PolicyKind::CacheAware);
    (prefix_aware && cfg.kv_events == KvEventsMode::Auto).then(|| {
        let page = usize::try_from(cfg.prefix_page_size).unwrap_or(16);
        Arc::new(kv_events::KvIndex::new(page, cfg.kv_events_max_blocks))
    })
}

/// PD: the prefill pool, its own registry and policy (default `--policy`: cache-aware).
fn prefill_pool(
    config: &ServeConfig,
    metrics: &Arc<Metrics>,
    shared: &Shared,
) -> Result<crate::routing::pd::PrefillPool, StartError> {
    let workers = config
        .pd
        .prefill_workers()
        .map_err(|e| StartError::Config(crate::config::ConfigError::Invalid(e)))?;
    let urls: Vec<String> = workers.iter().map(|(url, _)| url.clone()).collect();
    let mut routing = config.routing.clone();
    routing.policy = config.pd.prefill_policy.unwrap_or(config.routing.policy);
    let router = Arc::new(Router::new(
        Arc::new(Registry::sharing_ids(
            &urls,
            Arc::clone(&shared.worker_ids),
        )?),
        crate::routing::build(&routing),
        Arc::clone(metrics),
        shared.client.clone(),
    ));
    Ok(crate::routing::pd::PrefillPool::new(
        router,
        workers.into_iter().collect(),
    ))
}
