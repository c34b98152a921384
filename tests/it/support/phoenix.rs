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

/// A port free right now (Phoenix takes its ports as settings, not from the kernel).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Phoenix {
    pub async fn start(command: &str) -> Phoenix {
        let (http_port, grpc_port) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "switchboard-phoenix-{}-{http_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
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
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command}: {e}"));
        let phoenix = Phoenix {
            child,
            dir,
            http: format!("http://127.0.0.1:{http_port}"),
            grpc: format!("http://127.0.0.1:{grpc_port}"),
        };
        super::wait_ok_within(&format!("{}/v1/projects", phoenix.http), START_LIMIT).await;
        phoenix
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
