//! What the `switchboard` subcommands do once their flags are parsed.

use crate::config::ServeConfig;
use crate::sim::SimOptions;

fn init_logging(level: &str, json: bool) {
    // A second init (tests, demo) keeps the first subscriber.
    let _ = if json {
        tracing_subscriber::fmt()
            .with_env_filter(log_filter(level))
            .with_writer(std::io::stderr)
            .json()
            .try_init()
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(log_filter(level))
            .with_writer(std::io::stderr)
            .with_ansi(colours())
            .try_init()
    };
}

/// Colours only on a terminal: a log file or a collector gets plain text.
fn colours() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

fn log_filter(level: &str) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}

/// Logging plus span export. Kept apart from [`init_logging`] so that with traces off the
/// subscriber is exactly the plain one (a global filter that leaves the stage spans disabled).
fn init_logging_and_traces(
    config: &ServeConfig,
) -> Result<Option<crate::traces::Exporter>, String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let Some((exporter, spans)) =
        crate::traces::Exporter::start(&config.traces).map_err(|e| e.to_string())?
    else {
        init_logging(&config.log_level, config.log_json);
        return Ok(None);
    };
    let logs = if config.log_json {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .json()
            .with_filter(log_filter(&config.log_level))
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(colours())
            .with_filter(log_filter(&config.log_level))
            .boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(spans)
        .with(logs)
        .try_init();
    Ok(Some(exporter))
}

pub async fn serve(config: ServeConfig) -> Result<(), String> {
    let traces = init_logging_and_traces(&config)?;
    let gw = crate::gateway::start(config)
        .await
        .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Handle::current();
    tracing::info!(runtime = ?runtime.runtime_flavor(), threads = runtime.metrics().num_workers(), addr = %gw.addr, metrics = ?gw.metrics_addr, workers = gw.state.config.worker_urls.len(), models = gw.state.models.len(), model = %gw.state.models.default_model().model.name, piece_cuts = gw.state.models.default_model().model.tokenizer.piece_cuts(), "switchboard listening");
    // Printed before the main address: whoever waits for that line (tests) has both.
    if let Some(metrics) = gw.metrics_addr {
        println!("switchboard metrics listening on http://{metrics}");
    }
    let scheme = if gw.state.config.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    println!("switchboard listening on {scheme}://{}", gw.addr);
    let grace =
        std::time::Duration::from_secs(gw.state.config.reliability.shutdown_grace_period_secs);
    terminate_signal().await;
    gw.drain(grace).await;
    if let Some(t) = traces {
        t.shutdown();
    }
    Ok(())
}

/// SIGTERM (what orchestrators send) or Ctrl-C.
async fn terminate_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

pub async fn sim(opts: SimOptions) -> Result<(), String> {
    init_logging(&opts.log_level, false);
    if let Some(ports) = opts.ports.clone() {
        return sim_fleet(opts, ports).await;
    }
    let sim = crate::sim::start(opts).await.map_err(|e| e.to_string())?;
    // `--grpc-mode`: the HTTP side port first, so the last line is the worker's own address.
    let scheme = match sim.metrics_addr {
        Some(side) => {
            println!("switchboard sim HTTP routes (metrics) listening on http://{side}");
            "grpc"
        }
        None => "http",
    };
    println!(
        "switchboard sim (simulated SGLang worker) listening on {scheme}://{}",
        sim.addr
    );
    tokio::select! {
        r = sim.task => r.map_err(|e| e.to_string()),
        _ = terminate_signal() => Ok(()),
    }
}

/// `--ports FIRST-LAST`: an independent simulated worker on every port, one tokenizer for all.
async fn sim_fleet(opts: SimOptions, ports: std::ops::RangeInclusive<u16>) -> Result<(), String> {
    let model = crate::sim::SimModel::load(&opts).map_err(|e| e.to_string())?;
    let (first, last) = (*ports.start(), *ports.end());
    let mut tasks = tokio::task::JoinSet::new();
    for port in ports {
        let mut one = opts.clone();
        one.port = port;
        one.ports = None;
        let sim = crate::sim::start_with(one, model.clone())
            .await
            .map_err(|e| format!("port {port}: {e}"))?;
        tasks.spawn(sim.task);
    }
    let scheme = if opts.grpc_mode { "grpc" } else { "http" };
    println!(
        "switchboard sim fleet listening on {scheme}://{}:{first}-{last} ({} simulated SGLang workers)",
        opts.host,
        last - first + 1,
    );
    tokio::select! {
        Some(r) = tasks.join_next() => r.map_err(|e| e.to_string())?.map_err(|e| e.to_string()),
        _ = terminate_signal() => Ok(()),
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct DemoOptions {
    /// Gateway port.
    #[arg(long, default_value_t = 30000)]
    pub port: u16,
    /// How many simulated workers to start.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
}

/// The gateway plus simulated workers on loopback, in one process.
pub async fn demo(opts: DemoOptions) -> Result<(), String> {
    init_logging("info", false);
    let mut urls = Vec::new();
    for _ in 0..opts.workers.max(1) {
        let sim_opts = crate::sim::SimOptions::from_args_list(&["--port", "0", "--enable-metrics"])
            .map_err(|e| e.to_string())?;
        let sim = crate::sim::start(sim_opts)
            .await
            .map_err(|e| e.to_string())?;
        urls.push(format!("http://{}", sim.addr));
    }
    let mut args = vec![
        "--port".to_owned(),
        opts.port.to_string(),
        "--health-check-interval-secs".into(),
        "1".into(),
        "--worker-urls".into(),
    ];
    args.extend(urls.iter().cloned());
    let config = ServeConfig::from_args(args).map_err(|e| e.to_string())?;
    let gw = crate::gateway::start(config)
        .await
        .map_err(|e| e.to_string())?;
    let model = gw.state.models.default_model().model.name.clone();
    println!(
        "switchboard demo: gateway on http://{} in front of simulated SGLang workers {}",
        gw.addr,
        urls.join(", ")
    );
    println!("Try:\n");
    println!(
        "curl -N http://{}/v1/chat/completions -H 'Content-Type: application/json' \\\n  -d '{{\"model\":\"{}\",\"messages\":[{{\"role\":\"user\",\"content\":\"Hello!\"}}],\"max_tokens\":16,\"stream\":true}}'\n",
        gw.addr, model
    );
    println!("Metrics: curl http://{}/metrics    Stop: Ctrl-C", gw.addr);
    wait(gw.task).await
}

async fn wait(task: tokio::task::JoinHandle<()>) -> Result<(), String> {
    tokio::select! {
        r = task => r.map_err(|e| e.to_string()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
