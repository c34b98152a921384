//! Arize Phoenix, a real OTLP trace receiver (`SWITCHBOARD_PHOENIX`, made by
//! `.ci/phoenix-env.sh`), on loopback ports with a throwaway working directory; its REST API
//! lists the spans it received.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Phoenix migrates its SQLite database at start; on a busy 2-core machine that takes a while.
const START_LIMIT: Duration = Duration::from_secs(240);

pub struct Phoenix {
    child: Child,
    dir: std::path::PathBuf,
    pub http: String,
    pub grpc: String,
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `phoenix` command, or `None` after a visible SKIPPED line outside CI (in CI: a failure).
pub fn command() -> Option<String> {
    match std::env::var("SWITCHBOARD_PHOENIX") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but SWITCHBOARD_PHOENIX is not (see .ci/phoenix-env.sh)")
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: set SWITCHBOARD_PHOENIX (see .ci/phoenix-env.sh)"
            );
            None
        }
    }
}

/// How a start ended when Phoenix did not become ready.
enum Failed {
    Exited(String),
    TimedOut(String),
}

/// The last lines of Phoenix's own log, for the failure message.
fn log_tail(dir: &std::path::Path) -> String {
    let text = std::fs::read_to_string(dir.join("phoenix.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl Phoenix {
    /// Starts Phoenix, again on fresh ports if it exits before it is ready (a port taken after
    /// all); its output goes to `phoenix.log` in its directory and into the failure message.
    pub async fn start(command: &str) -> Phoenix {
        let mut exits = Vec::new();
        for _ in 0..3 {
            match Phoenix::start_once(command).await {
                Ok(phoenix) => return phoenix,
                Err(Failed::Exited(log)) => exits.push(log),
                Err(Failed::TimedOut(log)) => {
                    panic!("Phoenix was not ready within {START_LIMIT:?}; its log ends:\n{log}")
                }
            }
        }
        panic!("Phoenix exited before it was ready, 3 times; its logs end:\n{exits:#?}")
    }

    async fn start_once(command: &str) -> Result<Phoenix, Failed> {
        let (http_port, grpc_port) = (super::free_range(1), super::free_range(1));
        let dir = std::env::temp_dir().join(format!(
            "switchboard-phoenix-{}-{http_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("phoenix.log")).unwrap();
        let child = Command::new(command)
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", &dir)
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", http_port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            // Loopback only: no telemetry pixels, fonts or downloads.
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_ALLOW_EXTERNAL_RESOURCES", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command}: {e}"));
        let mut phoenix = Phoenix {
            child,
            dir,
            http: format!("http://127.0.0.1:{http_port}"),
            grpc: format!("http://127.0.0.1:{grpc_port}"),
        };
        let client = reqwest::Client::new();
        let ready = format!("{}/v1/projects", phoenix.http);
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Ok(r) = client.get(&ready).send().await {
                if r.status().is_success() {
                    return Ok(phoenix);
                }
            }
            if let Ok(Some(status)) = phoenix.child.try_wait() {
                let tail = log_tail(&phoenix.dir);
                return Err(Failed::Exited(format!("{status}:\n{tail}")));
            }
            if Instant::now() > deadline {
                return Err(Failed::TimedOut(log_tail(&phoenix.dir)));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The spans of one trace received so far (the default project).
    pub async fn spans(&self, trace_id: &str) -> Vec<Value> {
        let url = format!("{}/v1/projects/default/spans?limit=1000", self.http);
        let Ok(resp) = reqwest::get(&url).await else {
            return Vec::new();
        };
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        body["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["context"]["trace_id"] == trace_id)
            .cloned()
            .collect()
    }

    /// Waits (at most 60 s) until the trace holds spans with all of `names`.
    pub async fn wait_for(&self, trace_id: &str, names: &[&str]) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.spans(trace_id).await;
            let have = |n: &&str| spans.iter().any(|s| s["name"] == **n);
            if names.iter().all(have) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace_id} lacks some of {names:?}: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
