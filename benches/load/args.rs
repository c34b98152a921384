//! The load bench's command line: its flags, and `--scenario` expanded into them.

use std::path::PathBuf;

use clap::Parser;

use super::scenario::Scenario;
use super::workload::{Api, Shape};

/// How an open loop spaces its arrivals.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    /// Exponential gaps (random arrivals, bursts included)
    Poisson,
    /// Every gap 1/rate: the same mean load without bursts, so a batching worker is not pushed
    /// into the slower steps a burst of prefills causes
    Paced,
}

#[derive(Parser, Debug)]
#[command(
    about = "Switchboard gateway load benchmark",
    args_override_self = true
)]
pub struct Args {
    /// Named preset; any flag given as well overrides it
    #[arg(long)]
    pub scenario: Option<Scenario>,
    #[arg(long, value_enum, default_value = "chat")]
    pub api: Api,
    #[arg(long)]
    pub stream: bool,
    /// Closed loop: this many clients, each sending its next request when the last ends
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Open loop: arrivals per second (overrides --concurrency)
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: how arrivals are spaced
    #[arg(long, value_enum, default_value = "poisson")]
    pub arrivals: Arrivals,
    /// Open loop: connection limit (an arrival finding all busy counts as an error)
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    #[arg(long, default_value_t = 16)]
    pub max_tokens: u32,
    #[arg(long, default_value_t = 32)]
    pub prompt_words: usize,
    /// 0: every prompt unique; G: prompts share one of G prefixes of --shared-prefix-words
    #[arg(long, default_value_t = 0)]
    pub shared_prefix_groups: usize,
    /// Default: 3/4 of --prompt-words
    #[arg(long)]
    pub shared_prefix_words: Option<usize>,
    /// Distinct words prompts are drawn from: 32 ordinary one-token words, then made-up ones
    #[arg(long, default_value_t = 32)]
    pub vocabulary: usize,
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub model: String,
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    #[arg(long, default_value = "prefix_cost")]
    pub policy: String,
    /// Extra `switchboard sim` flags (one string)
    #[arg(long, allow_hyphen_values = true, default_value = "")]
    pub sim_args: String,
    /// Extra `switchboard serve` flags (one string)
    #[arg(long, allow_hyphen_values = true, default_value = "")]
    pub gateway_args: String,
    /// Gateway on core 0; sims and this generator on core 1 (needs taskset and 2 cores)
    #[arg(long)]
    pub pin: bool,
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Measurement window, seconds
    #[arg(long, default_value_t = 10.0)]
    pub secs: f64,
    /// Drive this already-running server instead of starting a gateway
    #[arg(long)]
    pub target: Option<String>,
    /// PID of --target, for its CPU and RSS
    #[arg(long)]
    pub target_pid: Option<u32>,
    /// Name of the --target phase in the report
    #[arg(long, default_value = "gateway")]
    pub label: String,
    /// Use these running workers for the direct phase instead of starting sims
    #[arg(long, num_args = 1..)]
    pub direct_urls: Vec<String>,
    #[arg(long)]
    pub skip_direct: bool,
    /// Direct phase: each request goes to the next worker in turn (a client-side round robin),
    /// instead of each client keeping one worker (`client i → worker i % N`)
    #[arg(long)]
    pub direct_rotate: bool,
    #[arg(long)]
    pub skip_gateway: bool,
    /// Also write the results here as JSON
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Print the sim flags this configuration uses and exit (compare.sh starts its own sims)
    #[arg(long)]
    pub print_sim_args: bool,
    /// Also this many unmeasured clients sending large unique chat prompts to the gateway
    /// phase, back to back (what a big prompt costs everyone else)
    #[arg(long, default_value_t = 0)]
    pub big_prompts: usize,
    /// Size of each --big-prompts prompt, bytes of text
    #[arg(long, default_value_t = 512 * 1024)]
    pub big_prompt_bytes: usize,
    /// Passed by `cargo bench`; ignored
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl Args {
    /// Parses the command line, expanding `--scenario` into flags placed before the user's.
    pub fn load() -> Args {
        let argv: Vec<String> = std::env::args().collect();
        let first = Args::parse_from(&argv);
        let Some(scenario) = first.scenario else {
            return first;
        };
        let mut expanded = vec![argv[0].clone()];
        expanded.extend(scenario.preset());
        expanded.extend(argv[1..].iter().cloned());
        Args::parse_from(expanded)
    }

    pub fn shape(&self) -> Shape {
        Shape {
            api: self.api,
            stream: self.stream,
            max_tokens: self.max_tokens,
            prompt_words: self.prompt_words,
            groups: self.shared_prefix_groups,
            prefix_words: self
                .shared_prefix_words
                .unwrap_or(self.prompt_words * 3 / 4),
            vocabulary: self.vocabulary,
            model: self.model.clone(),
        }
    }
}
