//! SGLang's KV events (`--kv-events-config`): the radix cache's changes published over ZMQ, as
//! `sglang/srt/disaggregation/kv_events.py` does.
//!
//! - `blocks`: SGLang's block hashes and the per-page events (recorded by `radix`).
//! - `wire`: a batch as msgspec's msgpack, per `--sglang-version`.
//! - `publisher`: the PUB socket (`[topic, seq as 8-byte big-endian, payload]`, seq from 0),
//!   the replay buffer and its ROUTER socket.

pub mod blocks;
pub mod publisher;
pub mod wire;

use serde::Deserialize;

/// `KVEventsConfig`: the keys, defaults and meaning of SGLang's, parsed from the flag's JSON.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct KvEventsConfig {
    /// `"null"` (no events) or `"zmq"`.
    pub publisher: String,
    /// PUB address; a `*`, `0.0.0.0` or `::` host binds (each DP rank at port + rank).
    pub endpoint: String,
    /// ROUTER address for replay requests (same port offset per rank).
    pub replay_endpoint: Option<String>,
    /// Batches kept for replay.
    pub buffer_steps: usize,
    pub hwm: usize,
    /// Batches queued for the publisher before new ones are dropped.
    pub max_queue_size: usize,
    pub topic: String,
    /// 0.5.23: bind (true) or connect (false) the PUB socket; unset infers from the host.
    pub bind: Option<bool>,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        KvEventsConfig {
            publisher: "null".into(),
            endpoint: "tcp://*:5557".into(),
            replay_endpoint: None,
            buffer_steps: 10_000,
            hwm: 100_000,
            max_queue_size: 100_000,
            topic: String::new(),
            bind: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KvEventsError {
    #[error("--kv-events-config: {0}")]
    Config(#[from] serde_json::Error),
    #[error("--kv-events-config: unknown publisher {0:?} (\"null\" or \"zmq\")")]
    Publisher(String),
    #[error("--kv-events-config: endpoint {0:?} is not tcp://host:port")]
    Endpoint(String),
    #[error("kv events: cannot bind {endpoint}: {source}")]
    Bind {
        endpoint: String,
        source: zeromq::ZmqError,
    },
}

impl KvEventsConfig {
    /// `KVEventsConfig.from_cli`; `None` for the `null` publisher.
    pub fn parse(json: &str) -> Result<Option<KvEventsConfig>, KvEventsError> {
        let cfg: KvEventsConfig = serde_json::from_str(json)?;
        match cfg.publisher.as_str() {
            "null" => Ok(None),
            "zmq" => Ok(Some(cfg)),
            other => Err(KvEventsError::Publisher(other.to_owned())),
        }
    }
}

/// `ZmqEventPublisher.offset_endpoint_port`: rank `r` publishes on the port plus `r`.
pub fn offset_port(endpoint: &str, rank: u32) -> Result<String, KvEventsError> {
    let bad = || KvEventsError::Endpoint(endpoint.to_owned());
    let (base, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    let port: u32 = port.parse().map_err(|_| bad())?;
    if !base.starts_with("tcp://") || port + rank > u32::from(u16::MAX) {
        return Err(bad());
    }
    Ok(format!("{base}:{}", port + rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sglang_keys_and_defaults() {
        let c = KvEventsConfig::parse(r#"{"publisher":"zmq","topic":"kv","format":"default"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.endpoint.as_str(), c.buffer_steps),
            ("tcp://*:5557", 10_000)
        );
        assert_eq!(c.topic, "kv");
        assert_eq!(KvEventsConfig::parse("{}").unwrap(), None);
        assert!(KvEventsConfig::parse(r#"{"publisher":"kafka"}"#).is_err());
        assert_eq!(offset_port("tcp://*:5557", 2).unwrap(), "tcp://*:5559");
        assert!(offset_port("ipc://x", 1).is_err());
    }
}
