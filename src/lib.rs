//! Switchboard: an OpenAI-compatible gateway in front of SGLang workers.
//!
//! ARCHITECTURE.md is the map: the module order (each module uses only those below it, checked
//! by `tests/it/layering.rs`), a request's phases (parse → prepare → pick → open leg → relay →
//! end) and the invariants of its ending (`relay::exchange`).

pub mod admission;
pub mod bundled;
pub mod commands;
pub mod config;
pub mod discovery;
pub mod error;
pub mod gateway;
pub mod hub;
pub mod metrics;
pub mod model;
pub mod models;
pub mod net;
pub mod prepare;
pub mod protocol;
pub mod reasoning;
pub mod relay;
pub mod routing;
pub mod server;
pub mod sim;
pub mod stream;
pub mod tokenize;
pub mod tool_calls;
pub mod traces;
pub mod upstream;
pub mod workers;
