//! Kubernetes pod discovery (`--service-discovery`): workers follow the pods that match a label
//! selector. A pod is a worker while it is Running, Ready, not terminating, has an IP and serves
//! the gateway's model; otherwise it is drained (no new requests, in-flight ones finish) and
//! removed.
//!
//! Watch events alone go stale when an event is lost (a DELETE during a watch reconnect is the
//! classic case), so the watch is restarted with a full re-list every
//! `--service-discovery-resync-secs` and anything the list no longer shows is removed.

pub mod config;
pub mod pod;
pub mod reconcile;
pub mod watch;

pub use config::DiscoveryConfig;
