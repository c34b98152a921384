//! `switchboard serve | sim | demo`

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

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // Parsed again with the `--config` file merged in.
        Command::Serve(_) => match ServeConfig::from_args(std::env::args_os().skip(2)) {
            Ok(config) => switchboard::commands::serve(config).await,
            Err(switchboard::config::ConfigError::Clap(e)) => e.exit(),
            Err(e) => Err(e.to_string()),
        },
        Command::Sim(opts) => switchboard::commands::sim(*opts).await,
        Command::Demo(opts) => switchboard::commands::demo(opts).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
