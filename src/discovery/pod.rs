//! What one pod means for the worker set: a worker URL (and where its model name comes from), or
//! the reason it is not a worker. Readiness, termination and selector match are separate gates:
//! a pod failing any one of them gets no traffic.

use k8s_openapi::api::core::v1::Pod;

use super::config::{ModelSource, Rules};

/// Overrides `--service-discovery-port` for one pod.
pub const PORT_ANNOTATION: &str = "switchboard.ai/port";
/// Prefill/decode disaggregation: `prefill` puts the pod in the prefill pool; `decode` (or no
/// label) in the decode pool, which is the only pool outside PD mode.
pub const ROLE_LABEL: &str = "switchboard.ai/pd-role";
/// A prefill pod's bootstrap port (SGLang's `--disaggregation-bootstrap-port`); absent: null.
pub const BOOTSTRAP_PORT_ANNOTATION: &str = "switchboard.ai/bootstrap-port";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A worker of the main pool (the decode pool in PD mode).
    Main,
    Prefill {
        bootstrap_port: Option<u16>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// The pod should be a worker at `url`; `model` is `None` when it must be asked from the worker.
    Serving {
        url: String,
        model: Option<String>,
        role: Role,
    },
    Excluded(String),
}

/// `namespace/name`: a pod's identity across events.
pub fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

pub fn evaluate(pod: &Pod, rules: &Rules) -> PodState {
    let excluded = |why: &str| PodState::Excluded(why.to_owned());
    let meta = &pod.metadata;
    if meta.deletion_timestamp.is_some() {
        return excluded("terminating");
    }
    // The API server filters by selector too; checking again here means a relabelled pod
    // leaves the set even if the server reported the change as a modification.
    let labels = meta.labels.as_ref();
    let matches = rules
        .selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    if !matches {
        return excluded("labels no longer match the selector");
    }
    let Some(status) = &pod.status else {
        return excluded("no status yet");
    };
    if status.phase.as_deref() != Some("Running") {
        return excluded("not running");
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return excluded("not ready");
    }
    let Some(ip) = status.pod_ip.as_deref().filter(|ip| !ip.is_empty()) else {
        return excluded("no pod IP");
    };
    let annotations = meta.annotations.as_ref();
    let port = match annotations.and_then(|a| a.get(PORT_ANNOTATION)) {
        None => rules.port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return excluded(&format!("annotation {PORT_ANNOTATION}=`{p}` is not a port")),
        },
    };
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    let model = match &rules.model_source {
        ModelSource::Worker => None,
        ModelSource::Label(k) => match labels.and_then(|l| l.get(k)) {
            Some(m) => Some(m.clone()),
            None => return excluded(&format!("no model label `{k}`")),
        },
        ModelSource::Annotation(k) => match annotations.and_then(|a| a.get(k)) {
            Some(m) => Some(m.clone()),
            None => return excluded(&format!("no model annotation `{k}`")),
        },
    };
    let role = match labels.and_then(|l| l.get(ROLE_LABEL)).map(String::as_str) {
        None | Some("decode") => Role::Main,
        Some("prefill") => match annotations.and_then(|a| a.get(BOOTSTRAP_PORT_ANNOTATION)) {
            None => Role::Prefill {
                bootstrap_port: None,
            },
            Some(p) => match p.parse::<u16>() {
                Ok(p) => Role::Prefill {
                    bootstrap_port: Some(p),
                },
                Err(_) => {
                    return excluded(&format!(
                        "annotation {BOOTSTRAP_PORT_ANNOTATION}=`{p}` is not a port"
                    ))
                }
            },
        },
        Some(other) => return excluded(&format!("label {ROLE_LABEL}=`{other}` is not a role")),
    };
    PodState::Serving {
        url: format!("{}://{host}:{port}", rules.scheme),
        model,
        role,
    }
}

pub use crate::model::same_model;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(source: ModelSource) -> Rules {
        Rules {
            selector: vec![("app".into(), "sglang".into())],
            port: 8000,
            scheme: "http".into(),
            model_source: source,
        }
    }

    fn pod(patch: serde_json::Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": "w0", "namespace": "ns", "labels": {"app": "sglang", "model": "m"},
                         "annotations": {}},
            "status": {"phase": "Running", "podIP": "10.0.0.7",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        merge(&mut v, patch);
        serde_json::from_value(v).unwrap()
    }

    fn merge(into: &mut serde_json::Value, patch: serde_json::Value) {
        match (into, patch) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    fn reason(state: PodState) -> String {
        match state {
            PodState::Excluded(r) => r,
            s => panic!("expected exclusion, got {s:?}"),
        }
    }

    #[test]
    fn ready_pod_is_a_worker() {
        let p = pod(json!({}));
        assert_eq!(key(&p), "ns/w0");
        assert_eq!(
            evaluate(&p, &rules(ModelSource::Worker)),
            PodState::Serving {
                url: "http://10.0.0.7:8000".into(),
                model: None,
                role: Role::Main
            }
        );
        assert_eq!(
            evaluate(&p, &rules(ModelSource::Label("model".into()))),
            PodState::Serving {
                url: "http://10.0.0.7:8000".into(),
                model: Some("m".into()),
                role: Role::Main
            }
        );
        let grpc = Rules {
            scheme: "grpc".into(),
            ..rules(ModelSource::Worker)
        };
        assert_eq!(
            evaluate(&p, &grpc),
            PodState::Serving {
                url: "grpc://10.0.0.7:8000".into(),
                model: None,
                role: Role::Main
            }
        );
        let p = pod(
            json!({"metadata": {"annotations": {PORT_ANNOTATION: "30001", "m": "x"}},
                           "status": {"podIP": "fd00::1"}}),
        );
        assert_eq!(
            evaluate(&p, &rules(ModelSource::Annotation("m".into()))),
            PodState::Serving {
                url: "http://[fd00::1]:30001".into(),
                model: Some("x".into()),
                role: Role::Main
            }
        );
    }

    #[test]
    fn pd_roles_come_from_a_label() {
        let r = rules(ModelSource::Worker);
        let role = |patch| match evaluate(&pod(patch), &r) {
            PodState::Serving { role, .. } => Ok(role),
            PodState::Excluded(why) => Err(why),
        };
        assert_eq!(
            role(json!({"metadata": {"labels": {ROLE_LABEL: "prefill"},
                                     "annotations": {BOOTSTRAP_PORT_ANNOTATION: "8998"}}})),
            Ok(Role::Prefill {
                bootstrap_port: Some(8998)
            })
        );
        assert_eq!(
            role(json!({"metadata": {"labels": {ROLE_LABEL: "prefill"}}})),
            Ok(Role::Prefill {
                bootstrap_port: None
            })
        );
        assert_eq!(
            role(json!({"metadata": {"labels": {ROLE_LABEL: "decode"}}})),
            Ok(Role::Main)
        );
        assert!(role(json!({"metadata": {"labels": {ROLE_LABEL: "both"}}})).is_err());
        assert!(role(json!({"metadata": {"labels": {ROLE_LABEL: "prefill"},
                                         "annotations": {BOOTSTRAP_PORT_ANNOTATION: "x"}}}))
        .is_err());
    }

    #[test]
    fn each_gate_excludes() {
        let r = rules(ModelSource::Worker);
        let cases = [
            (
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                "terminating",
            ),
            (
                json!({"metadata": {"labels": {"app": "other"}}}),
                "selector",
            ),
            (json!({"status": {"phase": "Pending"}}), "not running"),
            (
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                "not ready",
            ),
            (json!({"status": {"conditions": []}}), "not ready"),
            (json!({"status": {"podIP": null}}), "no pod IP"),
            (
                json!({"metadata": {"annotations": {PORT_ANNOTATION: "http"}}}),
                "not a port",
            ),
        ];
        for (patch, want) in cases {
            let got = reason(evaluate(&pod(patch.clone()), &r));
            assert!(got.contains(want), "{patch}: {got}");
        }
        let got = reason(evaluate(
            &pod(json!({})),
            &rules(ModelSource::Label("missing".into())),
        ));
        assert!(got.contains("no model label"), "{got}");
    }

    #[test]
    fn model_names() {
        assert!(same_model("Qwen2.5-7B", "qwen2.5-7b"));
        assert!(same_model("/models/Qwen2.5-7B", "Qwen2.5-7B"));
        assert!(same_model("Qwen/Qwen2.5-7B", "/data/Qwen2.5-7B/"));
        assert!(!same_model("Qwen2.5-7B", "Llama-3-8B"));
    }
}
