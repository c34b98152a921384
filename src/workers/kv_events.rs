//! SGLang's KV events: an exact view of each worker's prefix cache.
//!
//! When a worker's `/server_info` advertises a ZMQ publisher (`kv_events_config`), the gateway
//! subscribes to it (one subscription per DP rank, at the endpoint's port + rank) and keeps an
//! exact index of the blocks it holds; routing uses it for that worker instead of the
//! approximate index of what the gateway sent there.
//!
//! - `advertised`: a worker's publishers, from its `/server_info` or an override.
//! - `wire`: the messages and SGLang's msgpack encodings (0.5.9 arrays, 0.5.23 maps).
//! - `index`: the exact index, speculative entries, freshness and the memory bound.
//! - `metrics`: events, batches, gaps, replays, stale workers, blocks per worker.
//! - `subscriber`: discovery, one task per worker, when a view replays or rebuilds.
//! - `rank`: one DP rank's SUB socket, sequence checks and replay.
//! - `replay`: asking a publisher's ROUTER socket for the batches a gap lost.
//! - `view`: one batch's events applied to a (worker, rank) view, whatever the wire.
//! - `grpc_source`: the same index fed from a `grpc://` worker's `SubscribeKvEvents` stream.

pub mod advertised;
pub mod grpc_source;
pub mod index;
pub mod metrics;
mod rank;
mod replay;
pub mod subscriber;
mod view;
pub mod wire;

pub use index::{ExactMatch, KvIndex};
