//! The workers behind the gateway: identity, health and in-flight load.

pub mod availability;
pub mod breaker;
pub mod dp;
pub mod health;
pub mod kv_events;
pub mod load;
pub mod load_poll;
pub mod load_report;
pub mod page_key;
pub mod registry;
pub mod worker;

pub use availability::Available;
pub use load::LoadGuard;
pub use registry::{Registry, RegistryError};
pub use worker::{EngineLoad, Worker, WorkerId};
