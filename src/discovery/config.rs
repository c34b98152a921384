//! `--service-discovery` flags (SMG's names where SMG has one).

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct DiscoveryConfig {
    /// Find workers as Kubernetes pods (in-cluster service account, or KUBECONFIG).
    #[arg(long)]
    pub service_discovery: bool,
    /// Label selector for worker pods, as `key=value` (several: all must match).
    #[arg(long, num_args = 1..)]
    pub selector: Vec<String>,
    /// Namespace to watch; default: the kube config's namespace (in a pod: its own).
    #[arg(long)]
    pub service_discovery_namespace: Option<String>,
    /// Port the workers listen on in their pods (a pod's `switchboard.ai/port` annotation overrides it).
    #[arg(long, default_value_t = 80)]
    pub service_discovery_port: u16,
    /// Seconds between full re-lists of the pods, which heal missed watch events.
    #[arg(long, default_value_t = 60)]
    pub service_discovery_resync_secs: u64,
    /// Where a pod's model name comes from: `label:KEY` or `annotation:KEY`. Default: the worker's own `/v1/models`.
    #[arg(long)]
    pub model_id_from: Option<String>,
    /// How the discovered workers are spoken to: `http`, `grpc` (SGLang's gRPC service), or
    /// `https` / `grpcs` for the same over TLS (trusted through `--worker-ca-cert`).
    #[arg(long, default_value = "http", value_parser = ["http", "https", "grpc", "grpcs"])]
    pub service_discovery_protocol: String,
}

/// Where a discovered pod's model name is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    Label(String),
    Annotation(String),
    /// Asked from the worker itself (`GET /v1/models`).
    Worker,
}

/// The validated form of [`DiscoveryConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub selector: Vec<(String, String)>,
    pub port: u16,
    /// The workers' URL scheme: `http`, `https`, `grpc` or `grpcs`.
    pub scheme: String,
    pub model_source: ModelSource,
}

impl DiscoveryConfig {
    pub fn rules(&self) -> Result<Rules, String> {
        if self.selector.is_empty() {
            return Err("--service-discovery needs at least one --selector key=value".into());
        }
        let selector = self
            .selector
            .iter()
            .map(|s| match s.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    Ok((k.trim().to_owned(), v.trim().to_owned()))
                }
                _ => Err(format!("--selector `{s}` must be key=value")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let model_source = match self.model_id_from.as_deref() {
            None => ModelSource::Worker,
            Some(spec) => match spec.split_once(':') {
                Some(("label", k)) if !k.is_empty() => ModelSource::Label(k.to_owned()),
                Some(("annotation", k)) if !k.is_empty() => ModelSource::Annotation(k.to_owned()),
                _ => {
                    return Err(format!(
                        "--model-id-from `{spec}` must be label:KEY or annotation:KEY"
                    ))
                }
            },
        };
        Ok(Rules {
            selector,
            port: self.service_discovery_port,
            scheme: self.service_discovery_protocol.clone(),
            model_source,
        })
    }

    /// The selector as the API server's `labelSelector` query value.
    pub fn label_selector(rules: &Rules) -> String {
        rules
            .selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(selector: &[&str], model: Option<&str>) -> DiscoveryConfig {
        DiscoveryConfig {
            service_discovery: true,
            selector: selector.iter().map(|s| s.to_string()).collect(),
            service_discovery_namespace: None,
            service_discovery_port: 8000,
            service_discovery_resync_secs: 60,
            model_id_from: model.map(str::to_owned),
            service_discovery_protocol: "http".into(),
        }
    }

    #[test]
    fn parses_selector_and_model_source() {
        let rules = config(&["app=sglang", "tier = gpu"], Some("label:model"))
            .rules()
            .unwrap();
        assert_eq!(
            rules.selector,
            vec![
                ("app".into(), "sglang".into()),
                ("tier".into(), "gpu".into())
            ]
        );
        assert_eq!(rules.model_source, ModelSource::Label("model".into()));
        assert_eq!(
            DiscoveryConfig::label_selector(&rules),
            "app=sglang,tier=gpu"
        );
        let rules = config(&["a=b"], Some("annotation:x/y")).rules().unwrap();
        assert_eq!(rules.model_source, ModelSource::Annotation("x/y".into()));
        assert_eq!(
            config(&["a=b"], None).rules().unwrap().model_source,
            ModelSource::Worker
        );
    }

    #[test]
    fn rejects_bad_flags() {
        assert!(config(&[], None)
            .rules()
            .unwrap_err()
            .contains("--selector"));
        assert!(config(&["novalue"], None).rules().is_err());
        assert!(config(&["=v"], None).rules().is_err());
        assert!(config(&["a=b"], Some("env:X")).rules().is_err());
        assert!(config(&["a=b"], Some("label:")).rules().is_err());
    }
}
