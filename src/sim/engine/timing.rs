//! Step cost model (model time, microseconds).
//!
//! Shape from the simulator notes (shared docs, sglang-wire §5):
//!
//! * `prefill_us = base + per_token·ΣT_new + attn·Σ(T_new·ctx)`, where `ctx`
//!   is the mean context a chunk's tokens attend to (cached prefix + earlier
//!   chunks + half the chunk itself), so cached tokens still cost a small
//!   attention-read term.
//! * `decode_us = base + per_seq·max(0, B − knee) + per_1k_ctx·Σctx/1000`:
//!   flat (memory bound, weights read once per step) up to the batch knee,
//!   then rising linearly as the step turns compute bound.
//!
//! # Defaults: a ~1B bf16 model (Llama-3.2-1B / Qwen2.5-1.5B class) on one H100
//!
//! | knob | value | where it comes from |
//! |---|---|---|
//! | `prefill_base_us` | 3000 | §5 gives p0 ≈ 5–15 ms for 8B; a 1B model has a quarter of the layers' launch/scheduler work, so ~3 ms |
//! | `prefill_per_token_us` | 20 (50k tok/s) | §5: 10–30k tok/s for 8B (~16 GFLOP/token); 1B needs ~2.5 GFLOP/token, so ~6× that is possible, derated to 50k tok/s for small-batch efficiency |
//! | `prefill_attn_ns` | 0.5 ns per (new token × context token) | Llama-3.2-1B: 16 layers × 2048 hidden → ~4·16·2048 ≈ 131 kFLOP per query–key pair, ~0.33 ns at 400 TFLOP/s, derated for flash-attention efficiency |
//! | `decode_base_us` | 2000 | §5: d0 ≈ 5–7 ms for 8B (TPOT 6.5 ms at c=1, vLLM/H100 anchor); 1B weights are 2.5 GB → 0.75 ms at 3.35 TB/s plus ~1.2 ms fixed scheduler/graph-launch overhead |
//! | `decode_batch_knee` | 32 | §5: "nearly flat up to B≈16–32" |
//! | `decode_per_seq_us` | 25 | B=256 → ~7.6 ms/step ≈ 34k output tok/s, in line with small-model H100 serving throughput; §5 anchor TPOT 6.6→10.9 ms from c=4→16 for 8B |
//! | `decode_per_1k_ctx_us` | 11 | KV of Llama-3.2-1B is 2·16 layers·8 heads·64·2 B = 32 KiB/token: 1k tokens = 32 MiB ≈ 11 µs at ~3 TB/s |
//!
//! With these, a cold 2176-token prompt prefills in ≈ 47.7 ms and the same
//! prompt with a 2048-token warm prefix (128 new tokens) in ≈ 5.7 ms (8.4×),
//! matching the 70–75 % TTFT reductions quoted for cache-aware routing.

use serde::{Deserialize, Serialize};

/// Per-step cost knobs; see the module docs for the formulae and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimingModel {
    /// Fixed cost of one prefill (extend) step, µs.
    pub prefill_base_us: f64,
    /// Cost per newly computed prompt token, µs.
    pub prefill_per_token_us: f64,
    /// Attention cost per (new token × context token) pair, ns.
    pub prefill_attn_ns: f64,
    /// Fixed cost of one decode step, µs.
    pub decode_base_us: f64,
    /// Batch size up to which a decode step costs the same.
    pub decode_batch_knee: usize,
    /// Extra cost per running sequence beyond the knee, µs.
    pub decode_per_seq_us: f64,
    /// Cost per 1000 context tokens read by the batch, µs.
    pub decode_per_1k_ctx_us: f64,
}

impl Default for TimingModel {
    fn default() -> Self {
        Self::small_h100()
    }
}

impl TimingModel {
    /// ~1B-parameter bf16 model on one H100 (the default).
    pub fn small_h100() -> Self {
        TimingModel {
            prefill_base_us: 3000.0,
            prefill_per_token_us: 20.0,
            prefill_attn_ns: 0.5,
            decode_base_us: 2000.0,
            decode_batch_knee: 32,
            decode_per_seq_us: 25.0,
            decode_per_1k_ctx_us: 11.0,
        }
    }

    /// Every step takes no time (for throughput tests of the code around it).
    pub fn zero() -> Self {
        TimingModel {
            prefill_base_us: 0.0,
            prefill_per_token_us: 0.0,
            prefill_attn_ns: 0.0,
            decode_base_us: 0.0,
            decode_batch_knee: 0,
            decode_per_seq_us: 0.0,
            decode_per_1k_ctx_us: 0.0,
        }
    }

    /// Attention pairs for a chunk of `new_tokens` after `prefix` tokens of
    /// context: each new token attends to the prefix and, causally, to half
    /// the chunk on average.
    pub fn attn_pairs(prefix: usize, new_tokens: usize) -> f64 {
        new_tokens as f64 * (prefix as f64 + new_tokens as f64 / 2.0)
    }

    /// Duration of a prefill step computing `new_tokens` in total with
    /// `attn_pairs` summed over its chunks (see [`attn_pairs`](Self::attn_pairs)).
    pub fn prefill_us(&self, new_tokens: usize, attn_pairs: f64) -> f64 {
        self.prefill_base_us
            + self.prefill_per_token_us * new_tokens as f64
            + self.prefill_attn_ns * attn_pairs / 1000.0
    }

    /// Duration of a decode step over `batch` sequences holding
    /// `context_tokens` tokens of KV in total.
    pub fn decode_us(&self, batch: usize, context_tokens: usize) -> f64 {
        self.decode_base_us
            + self.decode_per_seq_us * batch.saturating_sub(self.decode_batch_knee) as f64
            + self.decode_per_1k_ctx_us * context_tokens as f64 / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_prefix_is_five_times_faster() {
        let t = TimingModel::default();
        let cold = t.prefill_us(2176, TimingModel::attn_pairs(0, 2176));
        let warm = t.prefill_us(128, TimingModel::attn_pairs(2048, 128));
        assert!(cold >= 5.0 * warm, "cold {cold} warm {warm}");
    }

    #[test]
    fn decode_flat_then_rising() {
        let t = TimingModel::default();
        let at = |b: usize| t.decode_us(b, 0);
        assert_eq!(at(1), at(32));
        assert!(at(33) > at(32) && at(64) > at(33) && at(256) > at(64));
    }

    #[test]
    fn zero_is_zero() {
        let t = TimingModel::zero();
        assert_eq!(t.prefill_us(10_000, 1e9), 0.0);
        assert_eq!(t.decode_us(256, 1_000_000), 0.0);
    }
}
