//! The load bench's named presets: each expands into flags (placed before the user's, so any
//! flag given as well overrides it) and the sims' engine knobs.

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Scenario {
    /// Non-streaming chat, 16 tokens, concurrency 64, zero-latency sims
    Nonstream,
    /// 256 concurrent chat streams of 64 tokens, worker TTFT 20 ms / ITL 10 ms
    Streams,
    /// Chat streams of 64 tokens arriving evenly at 330/s (~256 open at once), worker prefill
    /// 2 ms / ITL 10 ms: a steady load every system serves at the same pace
    StreamsSteady,
    /// Unique ~2,000-word prompts, 32 concurrent streams
    Longprompt,
    /// The same, the words drawn from 20,000 (mostly made-up, several tokens each) instead of 32
    LongpromptWide,
    /// Unique ~2,000-word prompts arriving evenly at 128/s, worker prefill 2 ms / ITL 10 ms: the
    /// same load every system serves at the same pace
    LongpromptSteady,
    /// 1,000 open slow streams: gateway KiB per stream
    Memory,
    /// Small non-streaming chat requests while two clients send 512 KiB prompts back to back
    Bigprompts,
}

/// Engine knobs giving a flat 20 ms prefill and a flat 10 ms decode step at any batch size, so
/// the worker's TTFT/ITL do not depend on how the gateway spreads the load.
const FLAT_20_10: &str = "--prefill-base-us 20000 --prefill-per-token-us 0 --prefill-attn-ns 0 \
    --decode-base-us 10000 --decode-batch-knee 1024 --decode-per-seq-us 0 --decode-per-1k-ctx-us 0";

/// The same with a 2 ms prefill: arrivals spread over the decode steps then cost a step ~2 ms
/// each, so an open loop at the closed loop's pace does not saturate the sims (with 20 ms, the
/// prefills of 165 arrivals a second per sim leave little time for decoding).
const FLAT_2_10: &str = "--prefill-base-us 2000 --prefill-per-token-us 0 --prefill-attn-ns 0 \
    --decode-base-us 10000 --decode-batch-knee 1024 --decode-per-seq-us 0 --decode-per-1k-ctx-us 0";

impl Scenario {
    pub fn preset(self) -> Vec<String> {
        let (flags, sim): (&str, String) = match self {
            Scenario::Nonstream => (
                "--api chat --concurrency 64 --max-tokens 16 --policy prefix_cost",
                "--zero-latency".into(),
            ),
            Scenario::Streams => (
                "--api chat --stream --concurrency 256 --max-tokens 64 --policy prefix_cost",
                FLAT_20_10.into(),
            ),
            // At 330/s a stream lasts ~0.77 s (64 steps of ~12 ms): ~256 open at once, as in
            // `streams`, but without its cohorts.
            Scenario::StreamsSteady => (
                "--api chat --stream --rate 330 --arrivals paced --max-tokens 64 \
                 --policy prefix_cost",
                FLAT_2_10.into(),
            ),
            Scenario::Longprompt => (
                "--api chat --stream --concurrency 32 --max-tokens 16 --prompt-words 2000 \
                 --policy prefix_cost",
                FLAT_20_10.into(),
            ),
            // `longprompt`'s closed loop settles into one of several paces (104–168/s), and which
            // depends on how long the gateway takes to forward a prompt: CPU a request is
            // compared at one pace here. ~23 streams open at once (a stream lasts ~180 ms).
            Scenario::LongpromptSteady => (
                "--api chat --stream --rate 128 --arrivals paced --max-tokens 16 \
                 --prompt-words 2000 --policy prefix_cost",
                FLAT_2_10.into(),
            ),
            Scenario::LongpromptWide => (
                "--api chat --stream --concurrency 32 --max-tokens 16 --prompt-words 2000 \
                 --vocabulary 20000 --policy prefix_cost",
                FLAT_20_10.into(),
            ),
            // 500 ms decode steps: a 64-token stream lasts ~32 s, longer than warm-up + window,
            // so all 1,000 are open (past their first token) when RSS is read.
            Scenario::Memory => (
                "--api chat --stream --concurrency 1000 --max-tokens 64 --warmup 4 --secs 3 \
                 --policy prefix_cost",
                "--prefill-base-us 1000 --prefill-per-token-us 0 --prefill-attn-ns 0 \
                 --decode-base-us 500000 --decode-batch-knee 2048 --decode-per-seq-us 0 \
                 --decode-per-1k-ctx-us 0 --max-running-requests 1024"
                    .into(),
            ),
            Scenario::Bigprompts => (
                "--api chat --concurrency 16 --max-tokens 16 --big-prompts 2 --skip-direct \
                 --policy prefix_cost",
                "--zero-latency".into(),
            ),
        };
        let mut v: Vec<String> = flags.split_whitespace().map(String::from).collect();
        v.push(format!("--sim-args={sim}"));
        v
    }
}
