//! Two llama.cpp `llama-server`s and the gateway (`--backend openai`) in front of them, for
//! the `real_engine` tests.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, MODEL};

/// The tokenizer the gateway loads for the engine's model.
pub const TOKENIZER: &str = "assets/tokenizers/smollm2-135m-instruct";

/// `(server binary, model)` from the environment, or `None` (after a visible SKIPPED line)
/// outside CI.
pub fn engine() -> Option<(String, String)> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        get("SWITCHBOARD_LLAMA_SERVER"),
        get("SWITCHBOARD_LLAMA_MODEL"),
    ) {
        (Some(s), Some(m)) => Some((s, m)),
        _ if std::env::var_os("CI").is_some() => panic!(
            "CI is set but SWITCHBOARD_LLAMA_SERVER / SWITCHBOARD_LLAMA_MODEL are not: \
             the real-engine tests must run in CI (see .ci/llama-server.sh)"
        ),
        _ => {
            // Straight to stderr: libtest captures eprintln! of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: set SWITCHBOARD_LLAMA_SERVER and SWITCHBOARD_LLAMA_MODEL (see .ci/llama-server.sh)"
            );
            None
        }
    }
}

/// One `llama-server` process, killed when dropped.
pub struct Llama {
    child: Option<Child>,
    pub url: String,
}

impl Llama {
    pub async fn start(server: &str, model: &str) -> Llama {
        let port = free_port();
        let quiet = std::env::var_os("SWITCHBOARD_TEST_LOGS").is_none();
        let out = || {
            if quiet {
                Stdio::null()
            } else {
                Stdio::inherit()
            }
        };
        let port_s = port.to_string();
        // -c 4096 over --parallel 4 slots; -t 1: one thread per server, two servers on 2 cores.
        let child = Command::new(server)
            .args(["--host", "127.0.0.1", "--port", &port_s, "-m", model])
            .args(["-c", "4096", "--parallel", "4", "-t", "1", "--metrics"])
            .args(["--alias", MODEL, "--jinja"])
            .stdin(Stdio::null())
            .stdout(out())
            .stderr(out())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {server}: {e}"));
        let llama = Llama {
            child: Some(child),
            url: format!("http://127.0.0.1:{port}"),
        };
        // /health is 503 while the model loads (~1 s idle, longer on a busy machine).
        super::wait_ok_within(&format!("{}/health", llama.url), Duration::from_secs(60)).await;
        llama
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `llamacpp:requests_processing`: slots busy generating.
    pub async fn processing(&self) -> f64 {
        let text = super::metrics_text(&self.url).await;
        super::metric(&text, "llamacpp:requests_processing").unwrap_or_else(|| {
            panic!(
                "no llamacpp:requests_processing in {}/metrics:\n{text}",
                self.url
            )
        })
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Two llama-servers and the gateway in front of them, ready.
pub struct Stack {
    pub llamas: [Llama; 2],
    pub gw: super::Proc,
}

pub async fn stack(server: &str, model: &str) -> Stack {
    let llamas = [
        Llama::start(server, model).await,
        Llama::start(server, model).await,
    ];
    let tokenizer = super::repo_path(TOKENIZER);
    let mut args = vec![
        "--backend",
        "openai",
        "--model-path",
        &tokenizer,
        "--served-model-name",
        MODEL,
        "--worker-urls",
    ];
    args.extend(llamas.iter().map(|l| l.url.as_str()));
    // Workers passed as flags (the harness's `workers` take simulator handles only), so the
    // harness waits for /health and we wait for /readiness: a worker passed its health check.
    let gw = super::gateway(&[], &args).await;
    super::wait_ok(&format!("{}/readiness", gw.url)).await;
    Stack { llamas, gw }
}
