//! Running the Python clients (OpenAI SDK, bench_serving) from Rust tests.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The python from `SWITCHBOARD_PYTHON` (made by `.ci/python-env.sh`), or `None` after a
/// visible SKIPPED line outside CI; in CI a missing one is a failure.
pub fn interpreter() -> Option<String> {
    match std::env::var("SWITCHBOARD_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but SWITCHBOARD_PYTHON is not: the python client tests must run in CI (see .ci/python-env.sh)")
        }
        _ => {
            // Straight to stderr: libtest captures eprintln! of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: set SWITCHBOARD_PYTHON (see .ci/python-env.sh)"
            );
            None
        }
    }
}

/// How long one Python client run may take.
pub const TIMEOUT: Duration = Duration::from_secs(240);

fn temp_file(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("switchboard-py-{}-{n}-{tag}", std::process::id()))
}

/// Runs `python script args…` with a deadline and returns the JSON summary (its last stdout
/// line). Output goes to files, not pipes, so a chatty failure cannot block it; on failure the
/// end of stderr (the script's FAILED line, bench_serving's report) is in the panic message.
pub async fn run(python: &str, script: &str, args: Vec<String>) -> Value {
    let (python, script) = (python.to_owned(), super::repo_path(script));
    tokio::task::spawn_blocking(move || {
        let (out_path, err_path) = (temp_file("stdout"), temp_file("stderr"));
        let out = std::fs::File::create(&out_path).expect("create stdout file");
        let err = std::fs::File::create(&err_path).expect("create stderr file");
        let mut child = Command::new(&python)
            .arg(&script)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {python}: {e}"));
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for python") {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        if !status.is_some_and(|s| s.success()) {
            let tail: Vec<&str> = stderr.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let what =
                status.map_or_else(|| format!("timed out after {TIMEOUT:?}"), |s| s.to_string());
            panic!(
                "{script} {args:?}: {what}\nstdout:\n{stdout}\nstderr (tail):\n{}",
                tail.join("\n")
            );
        }
        let line = stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("{script} {args:?}: no output"));
        // Straight to stderr: libtest captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "{} {line}",
            script.rsplit('/').next().unwrap_or(&script)
        );
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{script}: last line is not JSON ({e}): {line}"))
    })
    .await
    .expect("python runner thread")
}
