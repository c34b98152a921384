//! Prefill/decode disaggregation settings, with SMG's flag names (`--pd-disaggregation
//! --prefill URL [BOOTSTRAP_PORT] … --decode URL … --prefill-policy … --decode-policy …`).

use clap::{ArgAction, Args};

use crate::routing::PolicyKind;

#[derive(Debug, Clone, Default, Args)]
pub struct PdConfig {
    /// Pair a prefill and a decode worker per request (SGLang's PD disaggregation); the
    /// workers come from --prefill and --decode instead of --worker-urls.
    #[arg(long)]
    pub pd_disaggregation: bool,
    /// A prefill worker and its bootstrap port (`--disaggregation-bootstrap-port`; `none` or
    /// left out: sent as null). Repeat per worker.
    #[arg(long, num_args = 1..=2, value_names = ["URL", "BOOTSTRAP_PORT"], action = ArgAction::Append)]
    pub prefill: Vec<String>,
    /// A decode worker. Repeat per worker.
    #[arg(long, value_name = "URL", action = ArgAction::Append)]
    pub decode: Vec<String>,
    /// Policy on the prefill pool; default --policy (prefix_cost: cache-aware, where prefix
    /// reuse pays).
    #[arg(long, value_enum)]
    pub prefill_policy: Option<PolicyKind>,
    /// Policy on the decode pool; default power_of_two (a decode worker computes no prompt, so
    /// its load is what matters).
    #[arg(long, value_enum)]
    pub decode_policy: Option<PolicyKind>,
}

/// A prefill worker as given: its URL and bootstrap port.
pub type PrefillWorker = (String, Option<u16>);

impl PdConfig {
    /// The prefill workers, checked.
    pub fn prefill_workers(&self) -> Result<Vec<PrefillWorker>, String> {
        // The values of every `--prefill` in order: a URL starts a worker, a port (or `none`)
        // after it is that worker's.
        let mut workers: Vec<PrefillWorker> = Vec::new();
        for value in &self.prefill {
            if value.contains("://") {
                crate::upstream::Origin::parse(value)?;
                workers.push((value.trim_end_matches('/').to_owned(), None));
                continue;
            }
            let Some((url, port)) = workers.last_mut().filter(|(_, p)| p.is_none()) else {
                return Err(format!("--prefill: `{value}` is not a worker URL"));
            };
            if value != "none" {
                *port = Some(value.parse::<u16>().map_err(|_| {
                    format!("--prefill {url}: bootstrap port `{value}` is not a port number")
                })?);
            }
        }
        Ok(workers)
    }

    /// Checks the PD settings against the worker list of the co-located mode.
    pub fn validate(&self, worker_urls: &[String], discovery: bool) -> Result<(), String> {
        if !self.pd_disaggregation {
            if !self.prefill.is_empty() || !self.decode.is_empty() {
                return Err("--prefill and --decode need --pd-disaggregation".into());
            }
            return Ok(());
        }
        if !worker_urls.is_empty() {
            return Err(
                "--pd-disaggregation takes its workers from --prefill and --decode, not --worker-urls"
                    .into(),
            );
        }
        if !discovery && (self.prefill.is_empty() || self.decode.is_empty()) {
            return Err("--pd-disaggregation needs at least one --prefill and one --decode".into());
        }
        for url in &self.decode {
            crate::upstream::Origin::parse(url)?;
        }
        self.prefill_workers().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ServeConfig;

    #[test]
    fn smg_command_line_parses() {
        let c = ServeConfig::from_args([
            "--pd-disaggregation",
            "--prefill",
            "http://p1:30000",
            "8998",
            "--prefill",
            "http://p2:30000",
            "--decode",
            "http://d1:30000",
            "--decode",
            "http://d2:30000",
            "--prefill-policy",
            "cache_aware",
        ])
        .unwrap();
        let workers = c.pd.prefill_workers().unwrap();
        assert_eq!(
            workers,
            vec![
                ("http://p1:30000".to_owned(), Some(8998)),
                ("http://p2:30000".to_owned(), None)
            ]
        );
        assert_eq!(c.pd.decode.len(), 2);
        assert!(
            ServeConfig::from_args(["--prefill", "http://p:1", "--decode", "http://d:1"]).is_err()
        );
        assert!(ServeConfig::from_args(["--pd-disaggregation", "--decode", "http://d:1"]).is_err());
        assert!(ServeConfig::from_args([
            "--pd-disaggregation",
            "--prefill",
            "http://p:1",
            "x",
            "--decode",
            "http://d:1"
        ])
        .is_err());
    }

    #[test]
    fn config_file_lists_prefill_workers_with_ports() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pd.toml");
        std::fs::write(
            &path,
            "pd-disaggregation = true\nprefill = [[\"http://p1:1\", \"9001\"], [\"http://p2:1\"]]\ndecode = [\"http://d1:1\"]\ndecode-policy = \"round_robin\"\n",
        )
        .unwrap();
        let c = ServeConfig::from_args(["--config", path.to_str().unwrap()]).unwrap();
        assert_eq!(
            c.pd.prefill_workers().unwrap(),
            vec![
                ("http://p1:1".to_owned(), Some(9001)),
                ("http://p2:1".to_owned(), None)
            ]
        );
        assert_eq!(c.pd.decode, vec!["http://d1:1".to_owned()]);
    }
}
