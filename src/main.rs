//! `switchboard serve | sim | demo`

use std::num::NonZeroUsize;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchboard::config::ServeConfig;
use switchboard::sim::SimOptions;

// Why not glibc's malloc: Cargo.toml, beside the dependency.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long mimalloc keeps freed memory before handing it back to the OS. Its own default, 1 s,
/// is shorter than a steady load's rhythm: pages freed at the end of some requests went back and
/// were faulted in (and zeroed) again by later ones, ~8 % of a long prompt's CPU. 10 s, as
/// jemalloc's `dirty_decay_ms`, keeps the working set and still returns what a burst or the
/// start-up left. `MIMALLOC_PURGE_DELAY` in the environment still decides.
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;
/// `mi_option_purge_delay` in mimalloc.h's `mi_option_t` (the Rust bindings name only a few).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mimalloc's options are plain integers it reads when it purges; this runs
        // before any other thread of ours exists (`mi_option_set` is not thread safe).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

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
    tune_allocator();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_keeps_freed_memory_for_the_purge_delay() {
        // SAFETY: reading an option is a plain load.
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // mimalloc's own default for the purge delay: the option is the one meant.
            assert_eq!(get(), 1_000);
        }
        tune_allocator();
        let expected = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(PURGE_DELAY_MS);
        assert_eq!(get(), expected);
    }
}
