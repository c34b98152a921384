//! `switchboard serve` settings: one clap definition holds every setting with its default and
//! help text; a TOML file (`--config`) supplies values for flags the command line leaves out.

pub mod models;
pub mod pd;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// SGLang's native `/generate` with token ids tokenized here.
    Sglang,
    /// Any OpenAI-compatible worker: bodies forwarded, streams relayed as they arrive.
    Openai,
}

#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// TOML file with any of these settings (keys are the flag names with `_` or `-`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, default_value_t = 30000)]
    pub port: u16,
    /// Threads that serve requests. Default: one per CPU this process may use (its affinity and
    /// cgroup quota). With 1, every task runs on the thread that polls the sockets (a
    /// current-thread runtime: no cross-thread queues or wake-ups).
    #[arg(long)]
    pub worker_threads: Option<std::num::NonZeroUsize>,
    /// PEM certificate chain: the listener speaks HTTPS (with `--tls-key`). Omitted: plain HTTP.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Worker base URLs (http://host:port or https://host:port).
    #[arg(long, num_args = 1..)]
    pub worker_urls: Vec<String>,
    /// PEM CA certificate(s) trusted for https:// workers besides the system's roots.
    #[arg(long)]
    pub worker_ca_cert: Option<PathBuf>,
    /// PEM client certificate chain shown to https:// workers that ask for one (mTLS), with
    /// `--worker-client-key`.
    #[arg(long, requires = "worker_client_key")]
    pub worker_client_cert: Option<PathBuf>,
    /// PEM private key for `--worker-client-cert`.
    #[arg(long, requires = "worker_client_cert")]
    pub worker_client_key: Option<PathBuf>,
    #[command(flatten)]
    pub routing: crate::routing::RoutingConfig,
    #[command(flatten)]
    pub admission: crate::admission::AdmissionConfig,
    #[command(flatten)]
    pub reliability: crate::relay::reliability::ReliabilityConfig,
    #[command(flatten)]
    pub discovery: crate::discovery::DiscoveryConfig,
    #[command(flatten)]
    pub traces: crate::traces::TraceConfig,
    #[command(flatten)]
    pub pd: pd::PdConfig,
    /// Upstream protocol.
    #[arg(long, value_enum, default_value = "sglang")]
    pub backend: BackendKind,
    /// Directory with tokenizer.json and tokenizer_config.json, or a Hugging Face Hub repo id
    /// (`org/name`) whose tokenizer files are downloaded into the Hub cache. Omitted: the bundled
    /// SmolLM2 tokenizer.
    #[arg(long, alias = "tokenizer-path")]
    pub model_path: Option<PathBuf>,
    /// Hub revision (branch, tag or commit) of a repo id in `--model-path`.
    #[arg(long, alias = "revision", default_value = "main")]
    pub tokenizer_revision: String,
    /// Name clients use in `model`. Omitted: the model id the workers report on `/v1/models`
    /// (the tokenizer folder's name stays accepted), else the folder's name, or the Hub repo id
    /// (bundled: SmolLM2's).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Set at start-up when the served name came from the workers (not a setting).
    #[arg(skip)]
    pub served_model_name_from_workers: bool,
    /// The config file's `[[models]]`: several models behind this gateway (none: one model, from
    /// the flags above).
    #[arg(skip)]
    pub models: Vec<models::ModelSpec>,
    /// A Jinja chat template file overriding the tokenizer's.
    #[arg(long)]
    pub chat_template: Option<PathBuf>,
    /// Split reasoning models' chat output into `reasoning_content` and `content` (SGLang's parser
    /// names: deepseek-r1, deepseek-v3, qwen3, qwen3-thinking, kimi, kimi_k2, glm45). Omitted:
    /// the text is all content.
    #[arg(long, value_enum)]
    pub reasoning_parser: Option<crate::reasoning::ParserKind>,
    /// Read chat output into OpenAI `tool_calls` (SGLang's parser names: qwen25, hermes,
    /// llama3, mistral, pythonic, deepseekv3, deepseekv31, kimi_k2), so a request with `tools`
    /// is served on the native path. Omitted: the one the chat template or the model's name
    /// calls for (docs/api.md, "Tool calls"); none found, such requests go to the worker's own
    /// OpenAI route.
    #[arg(long, value_enum)]
    pub tool_call_parser: Option<crate::tool_calls::ParserKind>,
    /// Context length; defaults to the tokenizer's model_max_length, else 32768.
    #[arg(long)]
    pub context_length: Option<usize>,
    /// Bearer key required on inference routes.
    #[arg(long, env = "SWITCHBOARD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Limit for a whole request, in seconds (0 = none).
    #[arg(long, default_value_t = 1800)]
    pub request_timeout_secs: u64,
    /// Largest request body accepted, in bytes; by default 1 MiB + 64 per context token.
    #[arg(long)]
    pub max_body_bytes: Option<usize>,
    /// Seconds between worker health checks.
    #[arg(long, default_value_t = 5)]
    pub health_check_interval_secs: u64,
    /// Route a worker reporting `dp_size` > 1 whole, leaving its DP ranks to its own balancing
    /// (by default each rank is a routing unit: docs/routing.md).
    #[arg(long)]
    pub disable_dp_routing: bool,
    /// Milliseconds between polls of each worker's own load report (`/v1/loads`); 0 = off.
    /// A worker that is idle and unchanged is polled up to 32× less often.
    #[arg(long, default_value_t = 1000)]
    pub load_poll_interval_ms: u64,
    /// Bearer key for admin routes (`/workers`). Without it they answer only on a loopback listener.
    #[arg(long, env = "SWITCHBOARD_ADMIN_API_KEY", hide_env_values = true)]
    pub admin_api_key: Option<String>,
    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Log as JSON lines.
    #[arg(long)]
    pub log_json: bool,
    /// Also serve /metrics on this port (it is always on the main port).
    #[arg(long)]
    pub prometheus_port: Option<u16>,
    /// Address of the separate metrics listener.
    #[arg(long, default_value = "127.0.0.1")]
    pub prometheus_host: String,
}

/// Only here to parse `ServeConfig` on its own (for `--config` merging and tests).
#[derive(Parser)]
#[command(name = "switchboard serve")]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Clap(#[from] clap::Error),
}

impl ServeConfig {
    /// What the worker client trusts and shows for https:// workers.
    pub fn worker_tls(&self) -> crate::net::tls::ClientTls<'_> {
        crate::net::tls::ClientTls {
            extra_ca: self.worker_ca_cert.as_deref(),
            identity: self
                .worker_client_cert
                .as_deref()
                .zip(self.worker_client_key.as_deref()),
        }
    }

    /// Parses `serve` arguments (without the program and subcommand names), then fills in
    /// whatever the command line left out from the `--config` file.
    pub fn from_args<I, T>(args: I) -> Result<ServeConfig, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = std::iter::once(OsString::from("serve"))
            .chain(args.into_iter().map(Into::into))
            .collect();
        let matches = ServeOnly::command().try_get_matches_from(&args)?;
        let first = ServeOnly::from_arg_matches(&matches)?.serve;
        let Some(path) = first.config.clone() else {
            return first.validated();
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Toml {
                path: path.clone(),
                message: e.to_string(),
            })?;
        let known: Vec<String> = ServeOnly::command()
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        // File values become flags placed before the real ones; keys given on the command line are skipped.
        let mut merged = vec![OsString::from("serve")];
        for (key, value) in &table {
            let id = key.replace('-', "_");
            if id == "models" {
                continue;
            }
            if !known.contains(&id) || id == "config" {
                return Err(ConfigError::Toml {
                    path,
                    message: format!("unknown setting `{key}`"),
                });
            }
            if matches.value_source(&id) == Some(ValueSource::CommandLine) {
                continue;
            }
            let flag = format!("--{}", id.replace('_', "-"));
            push_value(&mut merged, &flag, value).map_err(|message| ConfigError::Toml {
                path: path.clone(),
                message: format!("`{key}`: {message}"),
            })?;
        }
        merged.extend(args.into_iter().skip(1));
        let matches = ServeOnly::command().try_get_matches_from(&merged)?;
        let mut config = ServeOnly::from_arg_matches(&matches)?.serve;
        config.models = match table.get("models") {
            Some(models) => {
                models::specs(models, &merged).map_err(|message| ConfigError::Toml {
                    path: path.clone(),
                    message,
                })?
            }
            None => Vec::new(),
        };
        config.validated()
    }

    fn validated(self) -> Result<ServeConfig, ConfigError> {
        if !self.models.is_empty() {
            self.check_models().map_err(ConfigError::Invalid)?;
        }
        for url in &self.worker_urls {
            crate::upstream::Origin::parse(url).map_err(ConfigError::Invalid)?;
        }
        if self.discovery.service_discovery {
            self.discovery.rules().map_err(ConfigError::Invalid)?;
        }
        self.pd
            .validate(&self.worker_urls, self.discovery.service_discovery)
            .map_err(ConfigError::Invalid)?;
        // An empty key would be compared against an empty or missing Bearer token and let every
        // request in: refuse it rather than guess what was meant.
        for (flag, key) in [
            ("--api-key", &self.api_key),
            ("--admin-api-key", &self.admin_api_key),
        ] {
            if key.as_deref().is_some_and(|k| k.trim().is_empty()) {
                return Err(ConfigError::Invalid(format!(
                    "{flag} is empty: give a key, or leave the setting out"
                )));
            }
        }
        if self.max_body_bytes == Some(0) {
            return Err(ConfigError::Invalid(
                "--max-body-bytes must be positive".into(),
            ));
        }
        Ok(self)
    }
}

fn push_value(out: &mut Vec<OsString>, flag: &str, value: &toml::Value) -> Result<(), String> {
    match value {
        toml::Value::Boolean(true) => out.push(flag.into()),
        toml::Value::Boolean(false) => {}
        toml::Value::String(s) => out.push(format!("{flag}={s}").into()),
        toml::Value::Integer(i) => out.push(format!("{flag}={i}").into()),
        toml::Value::Float(f) => out.push(format!("{flag}={f}").into()),
        toml::Value::Array(items) => {
            for item in items {
                match item {
                    // One occurrence with several values (`prefill = [["URL", "PORT"]]`).
                    toml::Value::Array(values) => {
                        out.push(flag.into());
                        for v in values {
                            out.push(scalar(v)?.into());
                        }
                    }
                    _ => push_value(out, flag, item)?,
                }
            }
        }
        _ => return Err("expected a string, number, boolean or list".into()),
    }
    Ok(())
}

fn scalar(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        _ => Err("expected a string or integer inside a nested list".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::PolicyKind;

    #[test]
    fn defaults_and_cli() {
        let c = ServeConfig::from_args([
            "--port",
            "8080",
            "--worker-urls",
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
        ])
        .unwrap();
        assert_eq!(c.port, 8080);
        assert_eq!(c.worker_urls.len(), 2);
        assert_eq!(c.host, "127.0.0.1");
        assert_eq!(c.routing.policy, PolicyKind::PrefixCost);
    }

    #[test]
    fn file_fills_gaps_and_cli_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "port = 9000\nlog_json = true\nworker-urls = [\"http://127.0.0.1:7\"]\npolicy = \"random\"\n").unwrap();
        let c = ServeConfig::from_args([
            "--config",
            path.to_str().unwrap(),
            "--policy",
            "power_of_two",
        ])
        .unwrap();
        assert_eq!(c.port, 9000);
        assert!(c.log_json);
        assert_eq!(c.worker_urls, vec!["http://127.0.0.1:7".to_string()]);
        assert_eq!(c.routing.policy, PolicyKind::PowerOfTwo);
        std::fs::write(&path, "bogus = 1\n").unwrap();
        assert!(matches!(
            ServeConfig::from_args(["--config", path.to_str().unwrap()]),
            Err(ConfigError::Toml { .. })
        ));
        std::fs::write(&path, "port = \"x\"\n").unwrap();
        assert!(ServeConfig::from_args(["--config", path.to_str().unwrap()]).is_err());
    }

    #[test]
    fn refuses_empty_keys_from_flags_and_file() {
        for flag in ["--api-key", "--admin-api-key"] {
            for key in ["", "  "] {
                let e = ServeConfig::from_args([flag, key]).unwrap_err();
                assert!(e.to_string().contains(flag), "{e}");
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        for setting in ["api_key", "admin-api-key"] {
            std::fs::write(&path, format!("{setting} = \"\"\n")).unwrap();
            let e = ServeConfig::from_args(["--config", path.to_str().unwrap()]).unwrap_err();
            assert!(matches!(e, ConfigError::Invalid(_)), "{setting}: {e}");
        }
        assert!(ServeConfig::from_args(["--api-key", "k", "--admin-api-key", "a"]).is_ok());
    }

    #[test]
    fn rejects_bad_worker_urls() {
        assert!(ServeConfig::from_args(["--worker-urls", "file:///etc/passwd"]).is_err());
        assert!(ServeConfig::from_args(["--worker-urls", "http://"]).is_err());
    }
}
