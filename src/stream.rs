//! Server-Sent Events: an incremental parser (bytes in, events out) and the encoder. No I/O.

pub mod sse;
