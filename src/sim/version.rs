//! `--sglang-version`: the SGLang release whose wire behaviour the simulator follows where 0.5.9
//! and 0.5.23 differ. Each method names the source it follows (paths inside the `sglang` wheel).

use super::driver::SameRid;

/// A simulated SGLang release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SglangVersion {
    #[value(name = "0.5.9")]
    V0_5_9,
    #[default]
    #[value(name = "0.5.23")]
    V0_5_23,
}

impl SglangVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            SglangVersion::V0_5_9 => "0.5.9",
            SglangVersion::V0_5_23 => "0.5.23",
        }
    }

    /// `TokenizerManager._validate_one_request`: 0.5.9 refuses `prompt + max_new_tokens >=
    /// context`, 0.5.23 only `>`.
    pub fn exceeds_context(self, prompt: usize, max_new: usize, context: usize) -> bool {
        match self {
            SglangVersion::V0_5_9 => prompt + max_new >= context,
            SglangVersion::V0_5_23 => prompt + max_new > context,
        }
    }

    /// A second live request with the same rid: 0.5.23's `TokenizerManager` refuses it
    /// (`Duplicate request ID detected`); 0.5.9's overwrites `rid_to_state[rid]`, orphaning
    /// the first.
    pub fn same_rid(self) -> SameRid {
        match self {
            SglangVersion::V0_5_9 => SameRid::Orphan,
            SglangVersion::V0_5_23 => SameRid::Refuse,
        }
    }

    /// `/get_load` (deprecated in 0.5.9, `entrypoints/http_server.py::get_load`) is gone in 0.5.23.
    pub fn has_get_load(self) -> bool {
        self == SglangVersion::V0_5_9
    }

    /// `num_waiting_uncached_tokens` in `/v1/loads` (0.5.23's `load_inquirer.py`; 0.5.9's
    /// `GetLoadsReqOutput` has no such field).
    pub fn loads_report_uncached_tokens(self) -> bool {
        self == SglangVersion::V0_5_23
    }

    /// The SSE error event `serve_generate_request` writes for a `ValueError` in a `/generate`
    /// stream: 0.5.9 sends only the message, 0.5.23 adds type, code and `retryable`.
    pub fn generate_error_event(self, message: &str) -> serde_json::Value {
        match self {
            SglangVersion::V0_5_9 => serde_json::json!({ "error": { "message": message } }),
            SglangVersion::V0_5_23 => serde_json::json!({ "error": {
                "message": message, "type": "invalid_request_error", "code": 400, "retryable": false,
            }}),
        }
    }

    /// `--stream-output` (0.5.9) streams delta `output_ids` but keeps `text` cumulative
    /// (`tokenizer_manager.py::_handle_batch_output`); 0.5.23's `--incremental-streaming-output`
    /// makes both deltas.
    pub fn incremental_text(self) -> bool {
        self == SglangVersion::V0_5_23
    }

    /// 0.5.23's contract gate (`http_server.py`, before `serve_generate_request`) rejects unknown
    /// `sampling_params` keys with a 400; 0.5.9 passes them to `SamplingParams(**…)`, whose
    /// `TypeError` nobody catches (a 500, or a stream cut after its headers).
    pub fn rejects_unknown_sampling_keys(self) -> bool {
        self == SglangVersion::V0_5_23
    }

    /// 0.5.23's spec-decoding metrics: `sglang:spec_num_steps`, `spec_num_draft_tokens`,
    /// `spec_cap_length`, `spec_block_accept_length` and the `spec_verify_calls_total` counter
    /// (`observability/metrics_collector.py`); 0.5.9 has only the accept length and rate.
    pub fn has_extended_spec_metrics(self) -> bool {
        self == SglangVersion::V0_5_23
    }
}
