//! Relaying a worker's generation to the client: OpenAI chunks for streams, one JSON object
//! otherwise, raw bytes for passthrough routes; latency and token metrics recorded on the way.

pub mod collect;
pub mod format;
pub mod generation;
pub mod passthrough;
pub mod reliability;
pub mod stream;

pub use generation::Generation;
