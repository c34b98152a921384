//! Child processes for the process benches (`switchboard sim`, `switchboard serve`) and what
//! `/proc` says about them. Each bench is a crate of its own and includes this file with
//! `#[path = "common/procs.rs"] mod procs;`.
//!
//! Every child listens on 127.0.0.1 port 0; its address is read from the line it prints once
//! bound, so no port is picked in advance and raced for. Every child is owned by a [`Proc`] guard
//! that kills and reaps it on drop, including during a panic, so an aborted benchmark never
//! leaves listeners behind.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a child may take to print its address, and then to answer its health route.
const START_LIMIT: Duration = Duration::from_secs(30);

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

/// The release binary `cargo bench` built next to this bench.
fn binary() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_switchboard"));
    if !path.exists() {
        eprintln!("missing {} (cargo build --release)", path.display());
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

/// `switchboard sim` on 127.0.0.1 with `extra` flags (under `taskset -c core` when given),
/// once `/health` answers.
pub fn start_sim(extra: &[String], core: Option<usize>) -> Proc {
    let mut args = vec!["sim".to_string()];
    args.extend_from_slice(extra);
    spawn(args, core, "/health")
}

/// `switchboard serve` on 127.0.0.1 in front of `workers`, once `/readiness` answers (it is
/// 503 until a worker passed its first health check).
pub fn start_gateway(workers: &[String], extra: &[String], core: Option<usize>) -> Proc {
    let mut args: Vec<String> = ["serve", "--log-level", "warn", "--worker-urls"]
        .map(String::from)
        .to_vec();
    args.extend_from_slice(workers);
    args.extend_from_slice(extra);
    spawn(args, core, "/readiness")
}

fn spawn(mut args: Vec<String>, core: Option<usize>, ready: &str) -> Proc {
    args.extend(["--host", "127.0.0.1", "--port", "0"].map(String::from));
    let exe = binary();
    let mut cmd = match core {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &c.to_string()]).arg(&exe);
            cmd
        }
        None => Command::new(&exe),
    };
    cmd.args(&args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let what = format!("`switchboard {}`", args.join(" "));
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let Some(stdout) = child.stdout.take() else {
        panic!("{what}: no stdout pipe");
    };
    let (tx, rx) = mpsc::channel();
    // Reads the address off stdout, then keeps draining it so the child never blocks on a full
    // pipe. A thread, so that a child that never prints cannot hang the bench.
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            if let Some(addr) = listening_addr(&line) {
                let _ = tx.send(addr);
            }
            line.clear();
        }
    });
    // Owned by the guard from here on: an early panic below still kills the child.
    let mut proc = Proc {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    proc.addr = match rx.recv_timeout(START_LIMIT) {
        Ok(addr) => addr,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} printed no address in {START_LIMIT:?}")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} exited before listening"),
    };
    wait_ok(proc.addr, ready, START_LIMIT);
    proc
}

/// The address in `switchboard listening on http://ADDR` and
/// `switchboard sim (simulated SGLang worker) listening on http://ADDR`.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let (head, tail) = line.trim().rsplit_once("listening on http://")?;
    if !head.starts_with("switchboard") {
        return None;
    }
    tail.trim_end_matches('/').parse().ok()
}

/// Polls `GET path` until it answers 200, at most `limit`.
pub fn wait_ok(addr: SocketAddr, path: &str, limit: Duration) {
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
    let (user, kernel) = ticks_split(pid);
    user + kernel
}

/// What a process has spent on a CPU so far, read two ways: utime and stime in whole clock ticks
/// (its own code and the kernel: syscalls, and the loopback TCP work they do on its behalf), and
/// its live threads' time on a CPU in ns (`/proc/PID/task/*/schedstat`), exact but blind to
/// threads that ended.
#[derive(Debug, Clone, Copy)]
pub struct CpuReading {
    user_ticks: u64,
    kernel_ticks: u64,
    ns: Option<u64>,
}

pub fn cpu_reading(pid: u32) -> CpuReading {
    let (user_ticks, kernel_ticks) = ticks_split(pid);
    CpuReading {
        user_ticks,
        kernel_ticks,
        ns: threads_ns(pid),
    }
}

impl CpuReading {
    /// CPU seconds from this reading to `later`, `hz` ticks a second: all of it, and of it the
    /// kernel's. All of it from the ns (a tick is 10 ms: at a few per cent of a core over 5 s,
    /// ±1 tick is ±7 %), unless they fall short of the ticks by more than the ticks' rounding, as
    /// they do when a thread ended in between; the kernel's part from stime, ticks only.
    pub fn until(self, later: CpuReading, hz: f64) -> (f64, f64) {
        let user = later.user_ticks.saturating_sub(self.user_ticks);
        let kernel = later.kernel_ticks.saturating_sub(self.kernel_ticks);
        let ticks_s = (user + kernel) as f64 / hz;
        let exact = self
            .ns
            .zip(later.ns)
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9);
        let all = match exact {
            Some(e) if e + 2.0 / hz >= ticks_s => e,
            _ => ticks_s,
        };
        (all, kernel as f64 / hz)
    }
}

/// utime and stime of a process (all its threads), in clock ticks.
fn ticks_split(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After ")" the state is field 3 of stat(5), so utime (14) and stime (15) sit at 11 and 12.
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    (get(11).unwrap_or(0), get(12).unwrap_or(0))
}

/// The sum of the first field of every live thread's schedstat (its time on a CPU, in ns); None
/// when a thread cannot be read (it may have just ended).
fn threads_ns(pid: u32) -> Option<u64> {
    let mut sum = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        sum += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(sum)
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
