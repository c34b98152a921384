//! What every simulator handler shares: the served model's settings, the engine driver, faults,
//! metrics, and the last requests received.

use super::script::Scripts;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::driver::Driver;
use super::faults::Faults;
use super::metrics::SimMetrics;
use super::version::SglangVersion;
use super::vocab::OutputVocab;
use crate::tokenize::Tokenizer;

pub struct SimState {
    pub model_name: String,
    pub tokenizer_path: String,
    pub tokenizer: Arc<Tokenizer>,
    pub vocab: OutputVocab,
    pub driver: Arc<Driver>,
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
    /// The last requests' rids and prompt ids, for `GET /sim/requests` (tests check what a
    /// gateway really sent).
    pub recent: Mutex<VecDeque<ReceivedRequest>>,
    /// `POST /sim/script` rules: prompts that make the model say a given text.
    pub scripts: Scripts,
    /// Prefill/decode disaggregation: the role, and the prefill side's rooms.
    pub pd: super::pd::Pd,
    pub page_size: usize,
    /// `--kv-events-config`'s publisher, for `SubscribeKvEvents` in `--grpc-mode`.
    pub kv_events_tap: Option<super::kv_events::publisher::Tap>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReceivedRequest {
    pub rid: String,
    pub input_ids: Vec<u32>,
    pub max_new_tokens: Option<u32>,
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
