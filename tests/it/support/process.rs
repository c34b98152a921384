//! A `switchboard` process started for a test: its address once it listens, its log, killed
//! when dropped.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Proc {
    child: Child,
    pub url: String,
    pub port: u16,
    /// The separate metrics listener (`--prometheus-port`), if the process has one.
    pub metrics_url: Option<String>,
    /// Its latest log lines (stderr).
    logs: Arc<Mutex<VecDeque<String>>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (a graceful shutdown), as an orchestrator stopping it would.
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Its latest log lines (at most [`LOG_LINES_KEPT`]), oldest first, one per line.
    pub fn logs(&self) -> String {
        let lines = self.logs.lock().expect("log lines");
        lines.iter().map(|l| format!("{l}\n")).collect()
    }
}

/// Log lines kept per process: enough for what a test just did, bounded for long tests.
const LOG_LINES_KEPT: usize = 2000;

impl Proc {
    /// Where its HTTP routes are: a gRPC sim's side port, else its own address.
    pub fn http_url(&self) -> &str {
        self.metrics_url.as_deref().unwrap_or(&self.url)
    }
}

/// What `switchboard serve` and `switchboard sim` print once they listen, then the bound address.
pub(super) const SERVE_LISTENING: &str = "switchboard listening on http://";
pub(super) const SERVE_LISTENING_TLS: &str = "switchboard listening on https://";
pub(super) const SIM_LISTENING: &str =
    "switchboard sim (simulated SGLang worker) listening on http://";
pub(super) const SIM_FLEET_LISTENING: &str = "switchboard sim fleet listening on http://";
pub(super) const GRPC_SIM_LISTENING: &str =
    "switchboard sim (simulated SGLang worker) listening on grpc://";
/// A `--grpc-mode` sim's HTTP side port (its `/metrics`, `/sim/…`), printed before its address.
const SIM_HTTP_LISTENING: &str = "switchboard sim HTTP routes (metrics) listening on http://";
const METRICS_LISTENING: &str = "switchboard metrics listening on http://";

/// How long a process may take to print its address.
const START_LIMIT: Duration = Duration::from_secs(20);

/// Starts `switchboard args…` on port 0 and returns it once it printed its `listening` line,
/// with the address it got: no port is picked here, so none can be taken in between.
pub(super) async fn start(
    args: Vec<String>,
    env: &[(&str, &str)],
    listening: &'static str,
) -> Proc {
    try_start(args.clone(), env, listening)
        .await
        .unwrap_or_else(|e| panic!("switchboard {args:?} {e}"))
}

/// [`start`], telling a process that exited before listening (a port taken) from success.
pub(super) async fn try_start(
    args: Vec<String>,
    env: &[(&str, &str)],
    listening: &'static str,
) -> Result<Proc, String> {
    let logs = std::env::var_os("SWITCHBOARD_TEST_LOGS").is_some();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(&args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start switchboard");
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut proc = Proc {
        child,
        url: String::new(),
        port: 0,
        metrics_url: None,
        logs: keep_logs(stderr, logs),
    };
    let head = tokio::time::timeout(START_LIMIT, read_stdout(stdout, listening, logs))
        .await
        .map_err(|_| format!("did not listen within {START_LIMIT:?}"))?
        .map_err(|_| format!("exited before listening: {}", proc.logs()))?;
    let url_after = |prefix: &str| {
        let scheme = prefix
            .rsplit(' ')
            .next()
            .and_then(|s| s.strip_suffix("://"))
            .unwrap_or("http");
        head.iter()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|addr| format!("{scheme}://{addr}"))
    };
    proc.url = url_after(listening).ok_or("no listening line")?;
    proc.port = proc
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('-').next())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("no port in {}", proc.url))?;
    proc.metrics_url = url_after(METRICS_LISTENING).or_else(|| url_after(SIM_HTTP_LISTENING));
    Ok(proc)
}

/// Reads a child's stdout on a thread: the lines up to and including the one starting with
/// `listening` are handed back; the rest is drained so the child never blocks on a full pipe.
/// With `SWITCHBOARD_TEST_LOGS` every line is echoed, straight to stdout (libtest captures
/// `println!` of passing tests).
fn read_stdout(
    stdout: ChildStdout,
    listening: &'static str,
    echo: bool,
) -> tokio::sync::oneshot::Receiver<Vec<String>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let echo = |line: &str| {
            if echo {
                let _ = writeln!(std::io::stdout(), "{line}");
            }
        };
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
        let mut head = Vec::new();
        for line in lines.by_ref() {
            echo(&line);
            let done = line.starts_with(listening);
            head.push(line);
            if done {
                let _ = tx.send(head);
                break;
            }
        }
        lines.for_each(|line| echo(&line));
    });
    rx
}

/// Drains a child's stderr (its log) on a thread, keeping the latest [`LOG_LINES_KEPT`] lines;
/// with `SWITCHBOARD_TEST_LOGS` each is echoed to stderr as well.
fn keep_logs(stderr: ChildStderr, echo: bool) -> Arc<Mutex<VecDeque<String>>> {
    let kept = Arc::new(Mutex::new(VecDeque::new()));
    let sink = Arc::clone(&kept);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if echo {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            let Ok(mut lines) = sink.lock() else { return };
            if lines.len() == LOG_LINES_KEPT {
                lines.pop_front();
            }
            lines.push_back(line);
        }
    });
    kept
}
