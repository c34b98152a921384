//! Gateway load benchmark: N simulated workers and the Switchboard gateway on loopback, driven
//! open-loop (`--rate`, Poisson or `--arrivals paced`) or closed-loop (`--concurrency`), with
//! the same traffic measured on the direct path (client → sim) so every figure is also a ratio
//! to it.
//!
//! `cargo bench --bench load -- --scenario NAME [flags]`
//! `cargo bench --bench load -- --help` lists the scenarios (`load/scenario.rs`) and the flags;
//! the results are in `docs/benchmarks.md`.
//!
//! Each phase gets fresh sims (so the direct phase cannot warm the gateway phase's prefix
//! caches), a warm-up, then a measurement window: requests finishing inside it are counted,
//! CPU comes from /proc/PID/stat utime+stime over the window, RSS from /proc/PID/status.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on a broken setup

#[path = "load/args.rs"]
mod args;
#[path = "load/background.rs"]
mod background;
#[path = "load/client.rs"]
mod client;
#[path = "common/procs.rs"]
mod procs;
#[path = "load/report.rs"]
mod report;
#[path = "load/scenario.rs"]
mod scenario;
#[path = "load/workload.rs"]
mod workload;

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use args::Args;
use procs::Proc;
use report::{Pcts, Phase};
use workload::Workload;

/// Core of the gateway under `--pin`; the sims and the load generator share the other one.
const GATEWAY_CORE: usize = 0;
const SIM_CORE: usize = 1;

fn addr_of(url: &str) -> SocketAddr {
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    host.parse()
        .unwrap_or_else(|_| panic!("{url}: expected http://IP:PORT"))
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// Runs the load against `addrs` (clients spread round-robin, or each request with
/// `--direct-rotate`) and measures one window.
/// `server`: the gateway's PID (CPU, RSS); `sims`: the workers' PIDs (CPU only).
fn run_phase(
    name: &str,
    args: &Args,
    wl: &Rc<Workload>,
    addrs: &[SocketAddr],
    server: Option<u32>,
    sims: &[u32],
) -> Phase {
    let hz = procs::clock_ticks();
    let me = std::process::id();
    let rec = Rc::new(client::Recorder::new());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    let rss_idle = server.map(|pid| procs::status_kib(pid, "VmRSS"));
    let mut phase = local.block_on(&rt, async {
        if let Some(rate) = args.rate {
            let drv = client::open_loop(
                addrs.to_vec(),
                rate,
                args.arrivals,
                args.max_connections,
                Rc::clone(wl),
                Rc::clone(&rec),
                args.stream,
            );
            tokio::task::spawn_local(drv);
        } else {
            // Only the direct phase has several addresses; a gateway phase has one.
            let rotate = args.direct_rotate;
            let shared_turn = Rc::new(Cell::new(0));
            for i in 0..args.concurrency {
                let (mine, turn) = if rotate {
                    (addrs.to_vec(), Rc::clone(&shared_turn))
                } else {
                    (vec![addrs[i % addrs.len()]], Rc::default())
                };
                let drv =
                    client::closed_loop(mine, turn, Rc::clone(wl), Rc::clone(&rec), args.stream);
                tokio::task::spawn_local(drv);
            }
        }
        tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
        let sims_ticks = || sims.iter().map(|&p| procs::cpu_ticks(p)).sum::<u64>();
        let (s0, g0, sim0) = (
            server.map(procs::cpu_reading),
            procs::cpu_ticks(me),
            sims_ticks(),
        );
        let t0 = Instant::now();
        rec.recording.set(true);
        tokio::time::sleep(Duration::from_secs_f64(args.secs)).await;
        rec.recording.set(false);
        let secs = t0.elapsed().as_secs_f64();
        let (s1, g1, sim1) = (
            server.map(procs::cpu_reading),
            procs::cpu_ticks(me),
            sims_ticks(),
        );
        // The window's CPU seconds, all and of it the kernel's.
        let server_cpu = s0.zip(s1).map(|(a, b)| a.until(b, hz));
        Phase {
            name: name.to_owned(),
            secs,
            server_cpu_s: server_cpu.map(|(all, _)| all),
            server_kernel_cpu_s: server_cpu.map(|(_, kernel)| kernel),
            server_rss_kib: server.map(|pid| procs::status_kib(pid, "VmRSS")),
            server_hwm_kib: server.map(|pid| procs::status_kib(pid, "VmHWM")),
            open_streams: rec.open_streams.get(),
            sims_cpu_s: (sim1 - sim0) as f64 / hz,
            gen_cpu_s: (g1 - g0) as f64 / hz,
            ..Phase::default()
        }
    });
    // Dropping the runtime closes every connection before the servers go.
    drop(local);
    drop(rt);
    phase.server_rss_idle_kib = rss_idle;
    phase.requests = rec.done.get();
    phase.chunks = rec.chunks.get();
    phase.errors = rec.errors.get();
    phase.ttft = Pcts::of(&mut rec.ttft_us.borrow_mut());
    phase.itl = Pcts::of(&mut rec.itl_us.borrow_mut());
    phase.e2e = Pcts::of(&mut rec.e2e_us.borrow_mut());
    phase.first_errors = rec.first_errors.borrow().clone();
    phase
}

/// With `--big-prompts`: the same phase again on the same server, with the big prompts sent
/// alongside (their answers are counted apart and printed, not mixed into the figures).
fn with_big_prompts(
    args: &Args,
    wl: &Rc<Workload>,
    addr: SocketAddr,
    server: Option<u32>,
    sims: &[u32],
) -> Option<Phase> {
    if args.big_prompts == 0 {
        return None;
    }
    let big =
        background::BigPrompts::start(addr, args.big_prompts, args.big_prompt_bytes, &args.model);
    let name = format!("{} + big prompts", args.label);
    let phase = run_phase(&name, args, wl, &[addr], server, sims);
    let c = &big.counts;
    let load = std::sync::atomic::Ordering::Relaxed;
    println!(
        "big prompts: {} × {} KiB sent; answers 2xx {}, 4xx {}, other {}; first: {:?}",
        c.sent.load(load),
        args.big_prompt_bytes / 1024,
        c.by_class[0].load(load),
        c.by_class[1].load(load),
        c.by_class[2].load(load),
        big.first_answer
            .lock()
            .unwrap()
            .as_deref()
            .and_then(|a| a.lines().last())
    );
    big.stop();
    Some(phase)
}

fn start_sims(args: &Args, pin: bool) -> Vec<Proc> {
    let extra = words(&args.sim_args);
    (0..args.workers.max(1))
        .map(|_| procs::start_sim(&extra, pin.then_some(SIM_CORE)))
        .collect()
}

fn main() {
    let args = Args::load();
    if args.print_sim_args {
        println!("{}", args.sim_args);
        return;
    }
    let pin = args.pin
        && procs::have_taskset()
        && std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    if args.pin && !pin {
        eprintln!("load: --pin needs taskset and 2 cores; running unpinned");
    }
    // The generator shares the sims' core, leaving the gateway's core to the gateway alone.
    if pin && !procs::pin_self(SIM_CORE) {
        eprintln!("load: could not pin the generator");
    }
    let wl = Rc::new(Workload::new(&args.shape()));
    let mode = match args.rate {
        Some(r) => format!("open loop {r}/s {:?}", args.arrivals),
        None => format!("closed loop ×{}", args.concurrency),
    };
    println!(
        "load: {:?} {} max_tokens={} prompt_words={} groups={} {mode}, {} workers, policy {}, \
         {} s warm-up + {} s, pinned: {pin}; {}",
        args.api,
        if args.stream { "stream" } else { "non-stream" },
        args.max_tokens,
        args.prompt_words,
        args.shared_prefix_groups,
        args.workers,
        args.policy,
        args.warmup,
        args.secs,
        procs::machine()
    );
    let mut phases = Vec::new();
    if !args.skip_direct {
        let sims = if args.direct_urls.is_empty() {
            start_sims(&args, pin)
        } else {
            Vec::new()
        };
        let mut addrs: Vec<SocketAddr> = args.direct_urls.iter().map(|u| addr_of(u)).collect();
        addrs.extend(sims.iter().map(|s| s.addr));
        let pids: Vec<u32> = sims.iter().map(Proc::pid).collect();
        phases.push(run_phase("direct", &args, &wl, &addrs, None, &pids));
    }
    if !args.skip_gateway {
        if let Some(target) = &args.target {
            let addr = addr_of(target);
            phases.push(run_phase(
                &args.label,
                &args,
                &wl,
                &[addr],
                args.target_pid,
                &[],
            ));
            phases.extend(with_big_prompts(&args, &wl, addr, args.target_pid, &[]));
        } else {
            let sims = start_sims(&args, pin);
            let urls: Vec<String> = sims.iter().map(Proc::url).collect();
            let mut extra = vec!["--policy".to_string(), args.policy.clone()];
            extra.extend(words(&args.gateway_args));
            let gw = procs::start_gateway(&urls, &extra, pin.then_some(GATEWAY_CORE));
            let pids: Vec<u32> = sims.iter().map(Proc::pid).collect();
            phases.push(run_phase(
                &args.label,
                &args,
                &wl,
                &[gw.addr],
                Some(gw.pid()),
                &pids,
            ));
            phases.extend(with_big_prompts(&args, &wl, gw.addr, Some(gw.pid()), &pids));
        }
    }
    report::print_table(&phases);
    for p in &phases {
        for e in &p.first_errors {
            println!("{}: error: {e}", p.name);
        }
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "bench": "load",
            "scenario": args.scenario.map(|s| format!("{s:?}").to_lowercase()),
            "argv": std::env::args().skip(1).filter(|a| a != "--bench").collect::<Vec<_>>(),
            "machine": procs::machine(),
            "pinned": pin,
            "phases": phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&doc).expect("json");
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}
