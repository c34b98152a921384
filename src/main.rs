//! `switchboard serve | sim | demo`

use std::num::NonZeroUsize;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchboard::config::ServeConfig;
use switchboard::sim::SimOptions;

// Why not glibc's malloc: Cargo.toml, beside the dependency.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "switchboard",
    version,
    about = "An OpenAI-compatible gateway for SGLang workers, with a built-in SGLang simulator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Settings are boxed: they are large next to `demo`'s.
#[derive(Subcommand)]
enum Command {
    /// Run the gateway in front of workers.
    Serve(Box<ServeConfig>),
    /// Run a simulated SGLang worker (no GPU needed).
    Sim(Box<SimOptions>),
    /// The gateway plus two simulated workers on loopback, ready for a curl.
    Demo(switchboard::commands::DemoOptions),
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    // `serve` is parsed again with the `--config` file merged in, before the runtime is built:
    // its settings say how many threads the runtime has.
    if let Command::Serve(config) = &mut cli.command {
        match ServeConfig::from_args(std::env::args_os().skip(2)) {
            Ok(merged) => **config = merged,
            Err(switchboard::config::ConfigError::Clap(e)) => e.exit(),
            Err(e) => return failed(e),
        }
    }
    let threads = match &cli.command {
        Command::Serve(config) => config.worker_threads,
        _ => None,
    };
    let runtime = match runtime(threads) {
        Ok(r) => r,
        Err(e) => return failed(format!("cannot start the async runtime: {e}")),
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(config) => switchboard::commands::serve(*config).await,
            Command::Sim(opts) => switchboard::commands::sim(*opts).await,
            Command::Demo(opts) => switchboard::commands::demo(opts).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(e),
    }
}

/// One thread (asked for, or one CPU to run on: a pinned sidecar, a container with a one-core
/// quota) is a current-thread runtime: every task runs on the thread that polls the sockets,
/// without the multi-threaded scheduler's cross-thread queues and wake-ups (~6 % less CPU a
/// non-streaming request, `docs/benchmarks.md`). More threads: the multi-threaded runtime.
fn runtime(threads: Option<NonZeroUsize>) -> std::io::Result<tokio::runtime::Runtime> {
    let threads = threads
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all().build()
}

fn failed(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("switchboard: {e}");
    ExitCode::FAILURE
}
