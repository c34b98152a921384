//! One measured phase (direct path or through a gateway) and the table / JSON comparing them.

use serde_json::{json, Value};

/// p50 / p90 / p99 and the mean, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub struct Pcts([f64; 4]);

impl Pcts {
    pub fn of(samples: &mut [u32]) -> Option<Pcts> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i] as f64 / 1000.0
        };
        let mean = samples.iter().map(|&s| f64::from(s)).sum::<f64>() / samples.len() as f64;
        Some(Pcts([at(0.50), at(0.90), at(0.99), mean / 1000.0]))
    }
}

#[derive(Debug, Default)]
pub struct Phase {
    pub name: String,
    pub secs: f64,
    pub requests: u64,
    pub chunks: u64,
    pub errors: u64,
    pub ttft: Option<Pcts>,
    pub itl: Option<Pcts>,
    pub e2e: Option<Pcts>,
    /// CPU seconds the server under test (gateway) spent in the window; None on the direct path.
    pub server_cpu_s: Option<f64>,
    /// The part of it spent in the kernel (system time): syscalls and the TCP work behind them.
    pub server_kernel_cpu_s: Option<f64>,
    pub server_rss_idle_kib: Option<u64>,
    pub server_rss_kib: Option<u64>,
    pub server_hwm_kib: Option<u64>,
    /// Streams holding their first token when the loaded RSS was read.
    pub open_streams: u64,
    pub sims_cpu_s: f64,
    pub gen_cpu_s: f64,
    pub first_errors: Vec<String>,
}

impl Phase {
    pub fn req_s(&self) -> f64 {
        self.requests as f64 / self.secs
    }
    pub fn chunks_s(&self) -> f64 {
        self.chunks as f64 / self.secs
    }
    /// CPU seconds as µs a finished request; None when nothing finished in the window.
    fn us_per_req(&self, secs: Option<f64>) -> Option<f64> {
        (self.requests > 0).then(|| secs.map(|s| s * 1e6 / self.requests as f64))?
    }
    /// None when nothing finished in the window (the memory scenario's streams outlive it).
    pub fn cpu_us_per_req(&self) -> Option<f64> {
        self.us_per_req(self.server_cpu_s)
    }
    pub fn kernel_us_per_req(&self) -> Option<f64> {
        self.us_per_req(self.server_kernel_cpu_s)
    }
    pub fn gen_us_per_req(&self) -> Option<f64> {
        self.us_per_req(Some(self.gen_cpu_s))
    }
    pub fn kib_per_stream(&self) -> Option<f64> {
        let grew = self.server_rss_kib? as f64 - self.server_rss_idle_kib? as f64;
        (self.open_streams > 0).then(|| grew / self.open_streams as f64)
    }

    pub fn to_json(&self) -> Value {
        let p = |x: Option<Pcts>| {
            x.map(|Pcts([a, b, c, m])| json!({"p50": a, "p90": b, "p99": c, "mean": m}))
        };
        json!({
            "name": self.name,
            "secs": self.secs,
            "requests": self.requests,
            "requests_per_s": self.req_s(),
            "chunks_per_s": self.chunks_s(),
            "errors": self.errors,
            "ttft_ms": p(self.ttft),
            "itl_ms": p(self.itl),
            "e2e_ms": p(self.e2e),
            "server_cpu_cores": self.server_cpu_s.map(|s| s / self.secs),
            "server_cpu_us_per_request": self.cpu_us_per_req(),
            "server_kernel_cpu_us_per_request": self.kernel_us_per_req(),
            "server_rss_idle_kib": self.server_rss_idle_kib,
            "server_rss_kib": self.server_rss_kib,
            "server_rss_hwm_kib": self.server_hwm_kib,
            "open_streams_at_rss": self.open_streams,
            "server_kib_per_stream": self.kib_per_stream(),
            "sims_cpu_cores": self.sims_cpu_s / self.secs,
            "generator_cpu_cores": self.gen_cpu_s / self.secs,
            "generator_cpu_us_per_request": self.gen_us_per_req(),
            "first_errors": self.first_errors,
        })
    }
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// Prints one row per figure: each phase's value, then (with a direct phase first) the ratio
/// and the difference of every other phase to it.
pub fn print_table(phases: &[Phase]) {
    let direct = phases.first().filter(|p| p.name == "direct");
    let mut header = format!("{:<26}", "figure");
    for p in phases {
        header += &format!(" {:>12}", p.name);
    }
    if direct.is_some() {
        for p in phases.iter().skip(1) {
            header += &format!(" {:>12} {:>12}", format!("{}/dir", p.name), "Δ");
        }
    }
    println!("{header}");
    type Get = fn(&Phase) -> Option<f64>;
    let rows: Vec<(&str, usize, Get)> = vec![
        ("requests/s", 0, |p| Some(p.req_s())),
        ("output chunks/s", 0, |p| Some(p.chunks_s())),
        ("errors", 0, |p| Some(p.errors as f64)),
        ("TTFT p50 ms", 3, |p| p.ttft.map(|x| x.0[0])),
        ("TTFT p90 ms", 3, |p| p.ttft.map(|x| x.0[1])),
        ("TTFT p99 ms", 3, |p| p.ttft.map(|x| x.0[2])),
        ("TTFT mean ms", 3, |p| p.ttft.map(|x| x.0[3])),
        ("ITL p50 ms", 3, |p| p.itl.map(|x| x.0[0])),
        ("ITL p90 ms", 3, |p| p.itl.map(|x| x.0[1])),
        ("ITL p99 ms", 3, |p| p.itl.map(|x| x.0[2])),
        ("E2E p50 ms", 3, |p| p.e2e.map(|x| x.0[0])),
        ("E2E p90 ms", 3, |p| p.e2e.map(|x| x.0[1])),
        ("E2E p99 ms", 3, |p| p.e2e.map(|x| x.0[2])),
        ("server CPU µs/request", 1, |p| p.cpu_us_per_req()),
        ("  of it kernel µs", 1, |p| p.kernel_us_per_req()),
        ("server CPU cores", 3, |p| {
            p.server_cpu_s.map(|s| s / p.secs)
        }),
        ("server RSS idle MiB", 1, |p| {
            p.server_rss_idle_kib.map(|k| k as f64 / 1024.0)
        }),
        ("server RSS loaded MiB", 1, |p| {
            p.server_rss_kib.map(|k| k as f64 / 1024.0)
        }),
        ("open streams at RSS read", 0, |p| {
            Some(p.open_streams as f64)
        }),
        ("server KiB/stream", 1, |p| p.kib_per_stream()),
        ("sims CPU cores", 3, |p| Some(p.sims_cpu_s / p.secs)),
        ("generator CPU cores", 3, |p| Some(p.gen_cpu_s / p.secs)),
        ("generator CPU µs/request", 1, |p| p.gen_us_per_req()),
    ];
    for (name, digits, get) in rows {
        let mut line = format!("{name:<26}");
        for p in phases {
            line += &format!(" {:>12}", cell(get(p), digits));
        }
        if let Some(d) = direct {
            for p in phases.iter().skip(1) {
                let (a, b) = (get(p), get(d));
                let ratio = a.zip(b).filter(|(_, b)| *b != 0.0).map(|(a, b)| a / b);
                let delta = a.zip(b).map(|(a, b)| a - b);
                line += &format!(" {:>12} {:>12}", cell(ratio, 3), cell(delta, digits));
            }
        }
        println!("{line}");
    }
}
