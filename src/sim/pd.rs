//! Prefill/decode disaggregation (`--disaggregation-mode`), with SGLang's wire contract: every
//! request carries `bootstrap_host`, `bootstrap_port` and `bootstrap_room` (the same for both
//! legs); a worker in either role answers 400 without a room (`Scheduler.handle_generate_request`).
//!
//! The model: the **prefill** sim runs the request's prefill in its own engine (its queue, its
//! radix cache) for the first token only, then holds the room's KV until a decode sim takes it
//! over its bootstrap port; its response (one token, `finish_reason` length) goes out when the
//! transfer is done, as SGLang's prefill answers once `KVPoll.Success`. The **decode** sim
//! registers the request, asks the prefill's bootstrap port for the room (HTTP on the given
//! host), and admits it to its running batch only when the transfer is done: no prefill step,
//! so its decodes never stall behind a prompt. The transfer costs
//! `--disaggregation-transfer-base-us + --disaggregation-transfer-us-per-token × prompt tokens`
//! (scaled by `--time-scale`), spent on the prefill side between the decode's request and the
//! answer.
//!
//! Simplification: the prefill engine frees the request's slot and KV at its first token (the
//! prompt stays in its radix cache); the held room is not counted against its KV pool.

mod ranks;
mod rooms;
mod transfer;

use std::time::Duration;

pub use ranks::{await_kv, sender_refusal, Asked};
pub use rooms::{KvInfo, Rooms};

use super::version::SglangVersion;
pub use transfer::{fetch_kv, parallel_info, serve_bootstrap, Bootstrap as BootstrapServer};

/// `--disaggregation-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Null,
    Prefill,
    Decode,
}

#[derive(Debug, Clone, clap::Args)]
pub struct PdOptions {
    /// Prefill/decode disaggregation role (SGLang's `--disaggregation-mode`).
    #[arg(long, value_enum, default_value_t = Mode::Null)]
    pub disaggregation_mode: Mode,
    /// Prefill role: the bootstrap server's port (0 picks a free one, reported by `/server_info`).
    #[arg(long, default_value_t = 8998)]
    pub disaggregation_bootstrap_port: u16,
    /// Fixed cost of one room's KV transfer, µs (handshake, RDMA setup).
    #[arg(long, default_value_t = 1000.0)]
    pub disaggregation_transfer_base_us: f64,
    /// KV transfer cost per prompt token, µs: 32 KiB/token (Llama-3.2-1B) over a 200 Gb/s link.
    #[arg(long, default_value_t = 1.3)]
    pub disaggregation_transfer_us_per_token: f64,
    /// Decode role: how long a request waits for its room's KV (`SGLANG_DISAGGREGATION_WAITING_TIMEOUT`).
    #[arg(long, default_value_t = 300.0)]
    pub disaggregation_waiting_timeout_secs: f64,
    /// Prefill role: how long a prefilled room waits for its decode (`SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`).
    #[arg(long, default_value_t = 300.0)]
    pub disaggregation_bootstrap_timeout_secs: f64,
}

/// The PD settings every handler sees.
pub struct Pd {
    pub mode: Mode,
    pub rooms: std::sync::Arc<Rooms>,
    pub waiting_timeout: Duration,
    pub bootstrap_timeout: Duration,
}

impl Pd {
    pub fn new(opts: &PdOptions) -> Pd {
        let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
        Pd {
            mode: opts.disaggregation_mode,
            rooms: Default::default(),
            waiting_timeout: secs(opts.disaggregation_waiting_timeout_secs),
            bootstrap_timeout: secs(opts.disaggregation_bootstrap_timeout_secs),
        }
    }
}

/// The bootstrap fields of a request body (`/generate` and the OpenAI routes alike).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Bootstrap {
    pub bootstrap_host: Option<String>,
    pub bootstrap_port: Option<u16>,
    pub bootstrap_room: Option<u64>,
    /// 0.5.23: the prefill DP rank that holds the KV (0.5.9 has no such field).
    disagg_prefill_dp_rank: Option<i64>,
}

impl Bootstrap {
    /// Read leniently: a body that fails this parse fails the route's own parse anyway.
    pub fn of(body: &[u8]) -> Bootstrap {
        serde_json::from_slice(body).unwrap_or_default()
    }

    /// The prefill rank the request names, as this release reads it.
    pub fn prefill_rank(&self, version: SglangVersion) -> Option<i64> {
        match version {
            SglangVersion::V0_5_9 => None,
            SglangVersion::V0_5_23 => self.disagg_prefill_dp_rank,
        }
    }
}

/// What the prefill side's bootstrap server tells a decode about its parallelism (SGLang's
/// `/route?engine_rank=-1`): its DP size and whether its ranks follow the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParallelInfo {
    pub dp_size: usize,
    pub follow_bootstrap_room: bool,
}

impl SglangVersion {
    /// The prefill rank a decode looks for the room's KV on; `None`: the rank the prefill
    /// registered with its bootstrap server. 0.5.9 (`CommonKVReceiver`): its own named rank,
    /// else the room's residue. 0.5.23 (`DecodePreallocQueue._resolve_prefill_dp_rank`): the
    /// request's `disagg_prefill_dp_rank`, else 0 for one rank, else the residue when the
    /// prefill follows the room, else the registered rank.
    pub fn prefill_rank_for_decode(
        self,
        named: Option<i64>,
        hint: Option<i64>,
        room: u64,
        prefill: ParallelInfo,
    ) -> Option<i64> {
        let residue = (room % prefill.dp_size.max(1) as u64) as i64;
        match self {
            SglangVersion::V0_5_9 => Some(named.unwrap_or(residue)),
            SglangVersion::V0_5_23 => match hint {
                Some(h) => Some(h),
                None if prefill.dp_size <= 1 => Some(0),
                None if prefill.follow_bootstrap_room => Some(residue),
                None => None,
            },
        }
    }
}

/// `Scheduler.handle_generate_request`'s refusal (a 400 abort), with Python's `{req.rid=}`.
pub fn missing_room(rid: &str) -> String {
    format!("Invalid request: Disaggregated request received without bootstrap room id. req.rid='{rid}'")
}

/// Why a decode request's KV never came, in `decode.py`'s words (`KVTransferError`'s text is
/// the mooncake backend's). Answered with status 500.
#[derive(Debug, Clone, PartialEq)]
pub enum KvFailure {
    /// The bootstrap server could not be reached (or no address was given).
    Handshake { addr: String },
    /// Nobody prefilled the room within the waiting timeout.
    Timeout { secs: f64 },
    /// The prefill side went away while the room was awaited.
    Lost { addr: String },
    /// The prefill worker has no such DP rank.
    NoRank { dp_group: i64 },
}

impl KvFailure {
    pub fn message(&self, rid: &str, room: u64) -> String {
        let (stage, reason) = match self {
            KvFailure::Handshake { addr } => (
                "handshake",
                format!("Could not fetch prefill parallel info from bootstrap_addr: {addr}"),
            ),
            KvFailure::Timeout { secs } => (
                "transfer",
                format!("Request {room} timed out after {secs:.1}s in KVPoll.WaitingForInput"),
            ),
            KvFailure::Lost { addr } => (
                "transfer",
                format!("Losing connection with prefill instance (bootstrap_addr: {addr})"),
            ),
            KvFailure::NoRank { dp_group } => (
                "handshake",
                format!("Could not fetch bootstrap info for engine rank: 0 and target_dp_group: {dp_group} and target_pp_rank 0"),
            ),
        };
        format!("Decode {stage} failed for request rank=0 decode_req.req.rid='{rid}' decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {reason}")
    }
}

/// A prefilled room no decode took within the bootstrap timeout (`prefill.py`, 500).
pub fn prefill_timeout(rid: &str, room: u64, secs: f64) -> String {
    prefill_failed(
        rid,
        room,
        &format!("Request {room} timed out after {secs:.1}s in KVPoll.Bootstrapping"),
    )
}

/// 0.5.23's KV sender on a rank that follows the room, given a request routed to another rank
/// without `disagg_prefill_dp_rank` (`CommonKVSender.__init__`, 500).
pub fn room_conflict(rid: &str, room: u64, rank: usize, dp_size: usize) -> String {
    let implied = room % dp_size.max(1) as u64;
    prefill_failed(rid, room, &format!("follow_bootstrap_room conflict: dispatched to dp_rank {rank} but bootstrap_room {room} implies dp_rank {implied}. Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow mixed routing."))
}

fn prefill_failed(rid: &str, room: u64, reason: &str) -> String {
    format!("Prefill bootstrap failed for request rank=0 req.rid='{rid}' req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_follow_sglang() {
        assert_eq!(
            missing_room("abc"),
            "Invalid request: Disaggregated request received without bootstrap room id. req.rid='abc'"
        );
        let m = KvFailure::Timeout { secs: 2.0 }.message("r1", 7);
        assert!(m.starts_with("Decode transfer failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=7"));
        assert!(m.ends_with("Request 7 timed out after 2.0s in KVPoll.WaitingForInput"));
    }

    #[test]
    fn bootstrap_fields_are_read_from_any_body() {
        let b = Bootstrap::of(br#"{"text":"hi","bootstrap_host":"127.0.0.1","bootstrap_port":8998,"bootstrap_room":9223372036854775807}"#);
        assert_eq!(b.bootstrap_room, Some(i64::MAX as u64));
        assert_eq!(b.bootstrap_port, Some(8998));
        assert!(Bootstrap::of(b"{}").bootstrap_room.is_none());
    }
}
