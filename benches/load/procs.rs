//! Child processes (simulated workers, the gateway) and what `/proc` says about them.
//!
//! Every child is owned by a [`Proc`] guard that kills and reaps it on drop, including during a
//! panic, so an aborted benchmark never leaves listeners behind.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Core of the gateway under `--pin`; the sims and the load generator share the other one.
pub const GATEWAY_CORE: usize = 0;
pub const SIM_CORE: usize = 1;

pub struct Proc {
    child: Child,
    pub addr: SocketAddr,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_switchboard"));
    if !path.exists() {
        eprintln!("load: missing {} (cargo build --release)", path.display());
        std::process::exit(2);
    }
    path
}

pub fn have_taskset() -> bool {
    Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Pins every thread of this process to `core`; called before the runtime starts its threads.
pub fn pin_self(core: usize) -> bool {
    let pid = std::process::id().to_string();
    Command::new("taskset")
        .args(["-a", "-p", "-c", &core.to_string(), &pid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts `switchboard <args>` (under `taskset -c core` when given) and waits for the
/// "listening on http://ADDR" line both subcommands print once bound.
fn spawn(args: &[String], core: Option<usize>) -> Proc {
    let exe = binary();
    let mut cmd = match core {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &c.to_string()]).arg(&exe);
            cmd
        }
        None => Command::new(&exe),
    };
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("cannot start switchboard");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`switchboard {}` exited before listening", args.join(" "));
        }
        let tail = line.trim().rsplit("http://").next().unwrap_or("");
        if let Ok(addr) = tail.parse::<SocketAddr>() {
            break addr;
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        while reader.read_until(b'\n', &mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    Proc { child, addr }
}

pub fn start_sim(extra: &[String], pin: bool) -> Proc {
    let mut args: Vec<String> = ["sim", "--host", "127.0.0.1", "--port", "0"]
        .map(String::from)
        .to_vec();
    args.extend_from_slice(extra);
    spawn(&args, pin.then_some(SIM_CORE))
}

pub fn start_gateway(workers: &[String], policy: &str, extra: &[String], pin: bool) -> Proc {
    let mut args: Vec<String> = ["serve", "--host", "127.0.0.1", "--port", "0"]
        .map(String::from)
        .to_vec();
    args.extend(["--policy".into(), policy.into(), "--log-level".into()]);
    args.push("warn".into());
    args.push("--worker-urls".into());
    args.extend_from_slice(workers);
    args.extend_from_slice(extra);
    let gw = spawn(&args, pin.then_some(GATEWAY_CORE));
    wait_ready(gw.addr, "/readiness", Duration::from_secs(30));
    gw
}

/// Polls `GET path` until it answers 200 (the gateway's `/readiness` is 503 until a worker
/// passed its first health check).
pub fn wait_ready(addr: SocketAddr, path: &str, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if get_status(addr, path) == Some(200) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{addr}{path} not ready after {limit:?}");
}

fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a process (all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After ")" the state is field 3 of stat(5), so utime (14) and stime (15) sit at 11 and 12.
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    get(11).unwrap_or(0) + get(12).unwrap_or(0)
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `N cores, CPU model` for the report.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            Some(
                l.strip_prefix("model name")?
                    .trim_start_matches([' ', '\t', ':']),
            )
        })
        .map(String::from)
        .unwrap_or_default();
    // Counted from /proc/cpuinfo: available_parallelism would see only the core we pinned to.
    let cores = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    format!("{cores} cores, {cpu}")
}
