//! End-to-end streaming throughput of one `switchboard sim --zero-latency` process on one core.
//!
//! Starts the release binary (pinned to core 1 with `taskset` when available), pins this process
//! (the load generator: one tokio current-thread runtime, raw HTTP/1.1 keep-alive over TCP) to
//! core 0, keeps `SIM_BENCH_STREAMS` (256) `/generate` SSE streams open, each asking
//! `SIM_BENCH_TOKENS` (256) tokens with `ignore_eos` and re-issued as soon as it ends, and
//! measures for `SIM_BENCH_SECS` (10) seconds after a 1 s warm-up. Reported per second: SSE data
//! chunks (excluding `[DONE]`), tokens (deltas of `meta_info.completion_tokens`), completed
//! requests, and CPU seconds of the sim and of the generator (from `/proc/<pid>/stat`). Run
//! once in SGLang's default cumulative mode and once with `--incremental-streaming-output`.
//!
//! When the HTTP side lags the engine, the sim (like SGLang) collapses queued tokens into one
//! chunk, so tokens/chunk > 1 means the chunk rate, not the engine, is the limit.
//!
//! `cargo bench --bench sim_throughput`
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on a broken setup

// Shared with the load bench, which uses all of it; this bench needs no gateway or RSS.
#[allow(dead_code)]
#[path = "common/procs.rs"]
mod procs;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

const WARMUP: Duration = Duration::from_secs(1);
/// The sim's core; the generator gets core 0.
const SIM_CORE: usize = 1;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// (busy, total) jiffies of one core from `/proc/stat` (busy = all but idle and iowait).
fn core_ticks(core: usize) -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let name = format!("cpu{core}");
    let Some(line) = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
    else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8) // user nice system idle iowait irq softirq steal
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

#[derive(Default)]
struct Counters {
    chunks: Cell<u64>,
    tokens: Cell<u64>,
    requests: Cell<u64>,
    errors: Cell<u64>,
}

impl Counters {
    fn snapshot(&self) -> [u64; 3] {
        [self.chunks.get(), self.tokens.get(), self.requests.get()]
    }
}

fn add(c: &Cell<u64>, n: u64) {
    c.set(c.get() + n);
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `completion_tokens` of one `/generate` chunk (meta_info is at the end, so search backwards).
fn completion_tokens(event: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"completion_tokens\":";
    let at = event.windows(KEY.len()).rposition(|w| w == KEY)? + KEY.len();
    let digits = event[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    std::str::from_utf8(&event[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads more bytes into `buf` (consumed bytes before `*pos` are dropped first).
async fn fill(stream: &TcpStream, buf: &mut Vec<u8>, pos: &mut usize) -> std::io::Result<()> {
    if *pos > 0 {
        buf.drain(..*pos);
        *pos = 0;
    }
    let len = buf.len();
    buf.resize(len + 64 * 1024, 0);
    loop {
        match stream.try_read(&mut buf[len..]) {
            Ok(0) => {
                buf.truncate(len);
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            Ok(n) => {
                buf.truncate(len + n);
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Err(e) = stream.readable().await {
                    buf.truncate(len);
                    return Err(e);
                }
            }
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// One keep-alive connection issuing streaming requests back to back.
async fn connection(addr: SocketAddr, request: Rc<Vec<u8>>, counters: Rc<Counters>) {
    loop {
        if let Err(e) = run_connection(addr, &request, &counters).await {
            add(&counters.errors, 1);
            if counters.errors.get() < 5 {
                eprintln!("sim_throughput: connection error: {e}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn run_connection(
    addr: SocketAddr,
    request: &[u8],
    counters: &Counters,
) -> std::io::Result<()> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(128 * 1024);
    let mut pos = 0usize;
    let mut sse: Vec<u8> = Vec::with_capacity(16 * 1024);
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    loop {
        write_all(&stream, request).await?;
        // Status line and headers.
        let head_end = loop {
            if let Some(i) = find(&buf[pos..], b"\r\n\r\n") {
                break pos + i + 4;
            }
            fill(&stream, &mut buf, &mut pos).await?;
        };
        let head = &buf[pos..head_end];
        if !head.starts_with(b"HTTP/1.1 200") {
            return Err(bad(&String::from_utf8_lossy(head)));
        }
        if find(&head.to_ascii_lowercase(), b"transfer-encoding: chunked").is_none() {
            return Err(bad("expected a chunked response"));
        }
        pos = head_end;
        sse.clear();
        let mut seen_tokens = 0u64;
        // Chunked body: `<hex size>\r\n<data>\r\n` ... `0\r\n\r\n`.
        loop {
            let line_end = loop {
                if let Some(i) = find(&buf[pos..], b"\r\n") {
                    break pos + i;
                }
                fill(&stream, &mut buf, &mut pos).await?;
            };
            let size_text = std::str::from_utf8(&buf[pos..line_end]).map_err(|_| bad("size"))?;
            let size_text = size_text.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| bad("chunk size"))?;
            pos = line_end + 2;
            while buf.len() - pos < size + 2 {
                fill(&stream, &mut buf, &mut pos).await?;
            }
            if size == 0 {
                pos += 2; // no trailers
                add(&counters.requests, 1);
                break;
            }
            sse.extend_from_slice(&buf[pos..pos + size]);
            pos += size + 2;
            // Complete SSE events (JSON never holds a raw newline).
            let mut start = 0;
            while let Some(i) = find(&sse[start..], b"\n\n") {
                let event = &sse[start..start + i];
                start += i + 2;
                let Some(data) = event.strip_prefix(b"data: ") else {
                    continue;
                };
                if data == b"[DONE]" {
                    continue;
                }
                add(&counters.chunks, 1);
                if let Some(t) = completion_tokens(data) {
                    add(&counters.tokens, t.saturating_sub(seen_tokens));
                    seen_tokens = seen_tokens.max(t);
                }
            }
            sse.drain(..start);
        }
    }
}

struct Measurement {
    mode: &'static str,
    secs: f64,
    chunks: f64,
    tokens: f64,
    requests: f64,
    sim_cpu: f64,
    gen_cpu: f64,
    /// Fraction of the sim's core busy with anything (the sim or other processes).
    core_busy: f64,
    errors: u64,
}

impl Measurement {
    /// Chunks per second of sim CPU: the figure that does not depend on other load.
    fn chunks_per_cpu_s(&self) -> f64 {
        self.chunks / self.sim_cpu.max(1e-9)
    }
}

fn measure(
    incremental: bool,
    pin: bool,
    streams: usize,
    max_tokens: usize,
    secs: f64,
) -> Measurement {
    let mut flags = vec!["--zero-latency".to_string()];
    if incremental {
        flags.push("--incremental-streaming-output".into());
    }
    let sim = procs::start_sim(&flags, pin.then_some(SIM_CORE));
    let (addr, sim_pid) = (sim.addr, sim.pid());
    let body = format!(
        "{{\"input_ids\":[1,2,3,4,5,6,7,8],\"sampling_params\":{{\"max_new_tokens\":{max_tokens},\"ignore_eos\":true}},\"stream\":true}}"
    );
    let request = Rc::new(
        format!(
            "POST /generate HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    );
    let counters = Rc::new(Counters::default());
    let hz = procs::clock_ticks();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    let measured = local.block_on(&rt, async {
        for _ in 0..streams {
            tokio::task::spawn_local(connection(addr, Rc::clone(&request), Rc::clone(&counters)));
        }
        tokio::time::sleep(WARMUP).await;
        let (c0, k0, s0, g0, t0) = (
            counters.snapshot(),
            core_ticks(SIM_CORE),
            procs::cpu_ticks(sim_pid),
            procs::cpu_ticks(std::process::id()),
            Instant::now(),
        );
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let (c1, k1, s1, g1, t1) = (
            counters.snapshot(),
            core_ticks(SIM_CORE),
            procs::cpu_ticks(sim_pid),
            procs::cpu_ticks(std::process::id()),
            Instant::now(),
        );
        let dt = (t1 - t0).as_secs_f64();
        let rate = |i: usize| (c1[i] - c0[i]) as f64 / dt;
        Measurement {
            mode: if incremental {
                "incremental"
            } else {
                "cumulative"
            },
            secs: dt,
            chunks: rate(0),
            tokens: rate(1),
            requests: rate(2),
            sim_cpu: (s1 - s0) as f64 / hz / dt,
            gen_cpu: (g1 - g0) as f64 / hz / dt,
            core_busy: (k1.0 - k0.0) as f64 / (k1.1 - k0.1).max(1) as f64,
            errors: counters.errors.get(),
        }
    });
    drop(local); // closes every connection before the sim goes
    drop(rt);
    drop(sim);
    measured
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is ignored.
    let secs: f64 = env_or("SIM_BENCH_SECS", 10.0);
    let streams: usize = env_or("SIM_BENCH_STREAMS", 256);
    let max_tokens: usize = env_or("SIM_BENCH_TOKENS", 256);
    let pin = procs::have_taskset() && cores() >= 2;
    let self_pinned = pin && procs::pin_self(0);
    println!(
        "sim_throughput: {streams} streams × {max_tokens} tokens, {secs} s per mode (+{} s warm-up); \
         sim pinned to core {SIM_CORE}: {}; generator pinned to core 0: {}",
        WARMUP.as_secs(),
        if pin { "yes (taskset)" } else { "NO (no taskset or < 2 cores)" },
        if self_pinned { "yes" } else { "no" },
    );
    let results: Vec<Measurement> = [false, true]
        .into_iter()
        .map(|incremental| measure(incremental, pin, streams, max_tokens, secs))
        .collect();
    println!(
        "{:<12} {:>10} {:>10} {:>8} {:>9} {:>9} {:>14} {:>9} {:>9}",
        "mode",
        "chunks/s",
        "tokens/s",
        "req/s",
        "tok/chunk",
        "sim cpu",
        "chunks/cpu-s",
        "core busy",
        "gen cpu"
    );
    for r in &results {
        println!(
            "{:<12} {:>10.0} {:>10.0} {:>8.1} {:>9.2} {:>9.2} {:>14.0} {:>9.2} {:>9.2}",
            r.mode,
            r.chunks,
            r.tokens,
            r.requests,
            r.tokens / r.chunks.max(1.0),
            r.sim_cpu,
            r.chunks_per_cpu_s(),
            r.core_busy,
            r.gen_cpu
        );
    }
    println!(
        "(sim cpu, gen cpu: CPU seconds per second; core busy: share of core {SIM_CORE} busy with anything)"
    );
    for r in &results {
        if r.errors > 0 {
            println!("{}: {} connection errors", r.mode, r.errors);
        }
        if r.sim_cpu < 0.9 && r.core_busy - r.sim_cpu > 0.05 {
            println!(
                "{}: other processes took {:.0}% of core {SIM_CORE}; chunks/cpu-s is the load-independent figure",
                r.mode,
                100.0 * (r.core_busy - r.sim_cpu)
            );
        }
    }
    let json: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "{{\"mode\":\"{}\",\"secs\":{:.2},\"chunks_per_s\":{:.0},\"tokens_per_s\":{:.0},\"requests_per_s\":{:.1},\"tokens_per_chunk\":{:.3},\"sim_cpu_s_per_s\":{:.3},\"chunks_per_sim_cpu_s\":{:.0},\"sim_core_busy\":{:.3},\"gen_cpu_s_per_s\":{:.3},\"errors\":{}}}",
                r.mode, r.secs, r.chunks, r.tokens, r.requests, r.tokens / r.chunks.max(1.0), r.sim_cpu, r.chunks_per_cpu_s(), r.core_busy, r.gen_cpu, r.errors
            )
        })
        .collect();
    println!(
        "{{\"bench\":\"sim_throughput\",\"streams\":{streams},\"max_new_tokens\":{max_tokens},\"sim_pinned\":{pin},\"generator_pinned\":{self_pinned},\"results\":[{}]}}",
        json.join(",")
    );
}
