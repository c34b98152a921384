//! Routing settings (`switchboard serve` flags, flattened into `ServeConfig`).

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum PolicyKind {
    RoundRobin,
    Random,
    PowerOfTwo,
}

impl PolicyKind {
    /// The flag value, e.g. `round_robin`.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Args)]
pub struct RoutingConfig {
    /// How workers are chosen.
    #[arg(long, value_enum, default_value = "round_robin")]
    pub policy: PolicyKind,
}
