//! Closed-loop workload checks of the prefix policies' defaults: 4 workers, 64 groups of
//! prompts sharing a 2,048-token system prompt, each with its own 128-token question.
//!
//! Load model: a window of `concurrency` requests in flight across the fleet; each new pick
//! books load (in-flight + its prompt as queued prefill) on its worker, the prefill is done two
//! picks later, and the oldest request finishes once the window is full. Load is booked as the
//! uncached part of the prompt (`prompt − predicted_cached`); booking whole prompts makes a
//! worker that just took a cache hit look 2,048 tokens busier than it is, and costs prefix_cost
//! about 10 % of its hits (see `workload_table`). Completion does not speed up on idle workers
//! here, so balance comes only from the policy: a pessimistic model.

use std::collections::VecDeque;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::{build, PolicyKind, RouteRequest, RoutingConfig};
use crate::workers::LoadGuard;

const SHARED: usize = 2048;
const QUESTION: usize = 128;
const GROUPS: usize = 64;

fn prompt(group: usize, question: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..SHARED as u32)
        .map(|t| group as u32 * 100_000 + t)
        .collect();
    v.extend((0..QUESTION as u32).map(|t| 90_000_000 + question as u32 * 1000 + t));
    v
}

struct Outcome {
    /// Cached tokens / the cached tokens of an ideal one-worker-per-group placement.
    cached_vs_ideal: f64,
    per_worker: Vec<usize>,
}

/// `book_whole_prompt`: book the whole prompt as queued prefill instead of its uncached part.
fn run(
    cfg: &RoutingConfig,
    groups: &[usize],
    concurrency: usize,
    book_whole_prompt: bool,
) -> Outcome {
    let ws = crate::routing::test_workers(4);
    let refs: Vec<_> = ws.iter().collect();
    let policy = build(cfg);
    let mut window: VecDeque<LoadGuard> = VecDeque::new();
    let mut per_worker = vec![0; ws.len()];
    let mut seen = [false; GROUPS];
    let (mut cached, mut ideal) = (0usize, 0usize);
    for (q, &g) in groups.iter().enumerate() {
        let ids = prompt(g, q);
        let req = RouteRequest {
            prompt_ids: &ids,
            session_key: None,
        };
        let pick = policy.pick(&req, &refs).expect("workers");
        per_worker[pick.index] += 1;
        cached += pick.predicted_cached;
        if std::mem::replace(&mut seen[g], true) {
            ideal += SHARED;
        }
        let booked = if book_whole_prompt {
            ids.len()
        } else {
            ids.len() - pick.predicted_cached
        };
        window.push_back(LoadGuard::book(Arc::clone(refs[pick.index]), booked as u64));
        let n = window.len();
        if let Some(g) = n.checked_sub(3).and_then(|i| window.get_mut(i)) {
            g.prefill_done();
        }
        if n > concurrency {
            window.pop_front();
        }
    }
    Outcome {
        cached_vs_ideal: cached as f64 / ideal.max(1) as f64,
        per_worker,
    }
}

fn uniform(rng: &mut SmallRng) -> Vec<usize> {
    let mut groups: Vec<usize> = (0..GROUPS).flat_map(|g| [g; 16]).collect();
    groups.shuffle(rng);
    groups
}

/// Group popularity ∝ 1 / rank^s.
fn zipf(rng: &mut SmallRng, n: usize, s: f64) -> Vec<usize> {
    let weights: Vec<f64> = (1..=GROUPS).map(|r| 1.0 / (r as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    (0..n)
        .map(|_| {
            let mut x = rng.random::<f64>() * total;
            weights
                .iter()
                .position(|w| {
                    x -= w;
                    x <= 0.0
                })
                .unwrap_or(GROUPS - 1)
        })
        .collect()
}

fn skew(per_worker: &[usize]) -> f64 {
    let max = per_worker.iter().copied().max().unwrap_or(0);
    let min = per_worker.iter().copied().min().unwrap_or(0);
    max as f64 / min.max(1) as f64
}

fn config(policy: PolicyKind) -> RoutingConfig {
    RoutingConfig {
        policy,
        ..RoutingConfig::default()
    }
}

#[test]
fn prefix_cost_defaults_keep_groups_together_and_balance_skew() {
    let cfg = config(PolicyKind::PrefixCost);
    for seed in 0..3 {
        for concurrency in [16, 64] {
            let mut rng = SmallRng::seed_from_u64(seed);
            let u = run(&cfg, &uniform(&mut rng), concurrency, false);
            assert!(
                u.cached_vs_ideal >= 0.85,
                "seed {seed} c {concurrency}: cached {:.3} of ideal, {:?}",
                u.cached_vs_ideal,
                u.per_worker
            );
            let z = run(&cfg, &zipf(&mut rng, 1024, 1.0), concurrency, false);
            assert!(
                skew(&z.per_worker) <= 2.0,
                "seed {seed} c {concurrency}: zipf per worker {:?}",
                z.per_worker
            );
        }
    }
}

/// `cargo test --lib workload_table -- --ignored --nocapture`: the figures behind the defaults.
#[test]
#[ignore]
fn workload_table() {
    for (name, policy) in [
        ("prefix_cost", PolicyKind::PrefixCost),
        ("cache_aware", PolicyKind::CacheAware),
        ("consistent_hash", PolicyKind::ConsistentHash),
        ("round_robin", PolicyKind::RoundRobin),
    ] {
        for dw in [64.0, 128.0, 256.0, 512.0] {
            if policy != PolicyKind::PrefixCost && dw != 256.0 {
                continue;
            }
            let cfg = RoutingConfig {
                decode_weight: dw,
                ..config(policy)
            };
            for concurrency in [16, 64, 256] {
                let mut rng = SmallRng::seed_from_u64(7);
                let u = run(&cfg, &uniform(&mut rng), concurrency, false);
                let z = run(&cfg, &zipf(&mut rng, 1024, 1.0), concurrency, false);
                let z2 = run(&cfg, &zipf(&mut rng, 1024, 1.2), concurrency, false);
                let mut rng = SmallRng::seed_from_u64(7);
                let w = run(&cfg, &uniform(&mut rng), concurrency, true);
                println!(
                    "{name:16} dw {dw:5} c {concurrency:3}: uniform cached {:.3} {:?} | zipf1.0 cached {:.3} {:?} skew {:.2} | zipf1.2 {:.3} {:?} skew {:.2} | whole-prompt booking: uniform cached {:.3}",
                    u.cached_vs_ideal, u.per_worker, z.cached_vs_ideal, z.per_worker,
                    skew(&z.per_worker), z2.cached_vs_ideal, z2.per_worker, skew(&z2.per_worker), w.cached_vs_ideal
                );
            }
        }
    }
}
