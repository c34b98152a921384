//! Switchboard: an OpenAI-compatible gateway in front of SGLang workers.
//!
//! One request's path, top to bottom, one module each:
//!
//! ```text
//! server::handlers   read and parse the body (server::body), count errors (dispatch::respond)
//!   → prepare        validate; chat template + tokenize once (tokenize); sampling → SGLang params
//!   → routing        pick a healthy worker with the configured policy (workers: registry, load guard)
//!   → upstream       POST /generate with our token ids (or forward the body to the worker's own route)
//!   → relay          worker chunks → OpenAI SSE / JSON, aborting the worker if the client leaves
//!   → metrics        TTFT, ITL, TPOT, E2E and stage durations, observed when the response really ends
//! ```
//!
//! `discovery` keeps the worker set in step with Kubernetes pods (`--service-discovery`).
//! `sim` is a simulated SGLang worker (engine model + HTTP server) used by tests, demos and benchmarks.

pub mod bundled;
pub mod commands;
pub mod config;
pub mod discovery;
pub mod error;
pub mod gateway;
pub mod metrics;
pub mod net;
pub mod prepare;
pub mod protocol;
pub mod relay;
pub mod routing;
pub mod server;
pub mod sim;
pub mod stream;
pub mod tokenize;
pub mod upstream;
pub mod workers;
