//! What every simulator handler shares: the served model's settings, the engine driver, faults,
//! metrics, and the last requests received.

use super::script::Scripts;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::faults::Faults;
use super::metrics::SimMetrics;
use super::version::SglangVersion;
use super::vocab::OutputVocab;
use crate::protocol::sglang::SamplingParams;
use crate::tokenize::Tokenizer;

pub struct SimState {
    pub model_name: String,
    pub tokenizer_path: String,
    pub tokenizer: Arc<Tokenizer>,
    pub vocab: Arc<OutputVocab>,
    /// The engines, one per DP rank (`--dp-size`), behind the controller's dispatch.
    pub driver: super::dp::Ranks,
    pub faults: Faults,
    pub metrics: SimMetrics,
    pub context_length: usize,
    pub version: SglangVersion,
    pub incremental_output: bool,
    pub skip_tokenizer_init: bool,
    pub cache_report: bool,
    pub eos_probability: f64,
    pub server_args: serde_json::Value,
    pub started_unix: u64,
    /// The last requests' routes, rids, prompt ids and sampling parameters, for `GET /sim/requests` (tests check what a
    /// gateway really sent).
    pub recent: Mutex<VecDeque<ReceivedRequest>>,
    /// `POST /sim/script` rules: prompts that make the model say a given text.
    pub scripts: Scripts,
    /// Prefill/decode disaggregation: the role, and the prefill side's rooms.
    pub pd: super::pd::Pd,
    pub page_size: usize,
    /// `--kv-events-config`'s publishers, one per DP rank in rank order (none without the
    /// flag), for `SubscribeKvEvents` in `--grpc-mode`.
    pub kv_events_taps: Vec<super::kv_events::publisher::Tap>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReceivedRequest {
    /// The route (or gRPC method) it came by: `/generate`, `/v1/chat/completions`, …
    pub route: &'static str,
    pub rid: String,
    pub input_ids: Vec<u32>,
    pub max_new_tokens: Option<u32>,
    /// All of its sampling parameters (constraints such as `json_schema` included).
    pub sampling_params: SamplingParams,
    /// The DP rank it named, in the field this release reads (`--dp-size`).
    pub dp_rank: Option<i64>,
}

/// How many received requests `/sim/requests` remembers.
const RECENT_REQUESTS: usize = 256;

impl SimState {
    pub fn record(&self, req: ReceivedRequest) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT_REQUESTS {
            recent.pop_front();
        }
        recent.push_back(req);
    }

    pub fn recent_requests(&self) -> Vec<ReceivedRequest> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().cloned().collect()
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
