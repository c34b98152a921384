//! The cost of a pick per policy at 8 / 64 / 512 / 1,000 / 4,000 workers with ~1M tokens indexed,
//! prefix_cost on the KV-event index at 64 workers with 1M blocks, and prefix index
//! match / insert against index size. A pick is what the router does but for its metrics: the
//! registry's list of available units (`Registry::available`), then `routing::select` (the
//! candidates, the policy, the breaker's admission). After criterion,
//! prints p50/p99 of single picks timed one by one (criterion reports means of batches, and the
//! targets are tails: p99 < 20 µs at 64 workers, < 50 µs at 4,000).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on a broken setup

#[path = "common/allocator.rs"]
mod allocator;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use switchboard::routing::cache_aware::{CacheAware, CacheAwareConfig};
use switchboard::routing::consistent_hash::ConsistentHash;
use switchboard::routing::prefix_cost::PrefixCost;
use switchboard::routing::prefix_index::PrefixIndex;
use switchboard::routing::{select, Policy, RouteRequest};
use switchboard::workers::kv_events::wire::Stored;
use switchboard::workers::kv_events::KvIndex;
use switchboard::workers::{EngineLoad, Registry, WorkerId};

const INDEXED: usize = 1 << 20;
const GROUPS: u32 = 256;

/// A 2,048-token system prompt per group plus a 128-token question.
fn prompt(group: u32, question: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..2048).map(|t| group * 10_000 + t).collect();
    v.extend((0..128).map(|t| 100_000_000 + question * 1000 + t));
    v
}

/// A registry of `n` healthy workers with random engine loads.
fn workers(n: usize) -> Registry {
    let mut rng = SmallRng::seed_from_u64(n as u64);
    let urls: Vec<String> = (0..n)
        .map(|i| format!("http://10.0.0.1:{}", 2000 + i))
        .collect();
    let registry = Registry::new(&urls).expect("valid urls");
    for w in registry.snapshot().iter() {
        let load = EngineLoad {
            running_requests: rng.random_range(0..32),
            waiting_requests: rng.random_range(0..4),
            waiting_uncached_tokens: rng.random_range(0..8192),
        };
        w.set_engine_load(load, 0);
        w.set_healthy(true);
    }
    registry
}

fn policies(page: usize) -> Vec<(&'static str, Box<dyn Policy>)> {
    let cache_aware = CacheAware::new(CacheAwareConfig {
        cache_threshold: 0.3,
        balance_abs_threshold: 64,
        balance_rel_threshold: 1.5,
        eviction_interval: std::time::Duration::ZERO,
        page_size: page,
        max_tree_size: INDEXED,
    });
    let prefix_cost = PrefixCost::new(1.0, 256.0, PrefixIndex::new(page, INDEXED));
    vec![
        ("prefix_cost", Box::new(prefix_cost)),
        ("cache_aware", Box::new(cache_aware)),
        ("consistent_hash", Box::new(ConsistentHash::new(1.25, page))),
    ]
}

/// Routes distinct prompts until the policy's index is full (its budget is `INDEXED`).
fn fill(policy: &dyn Policy, ws: &Registry) {
    for q in 0..(3 * INDEXED / 2176) as u32 {
        let ids = prompt(q % GROUPS, q);
        let req = RouteRequest {
            prompt_ids: &ids,
            session_key: None,
        };
        select(policy, &req, &ws.available(), &[]).expect("healthy workers");
    }
}

fn bench_pick(cr: &mut Criterion) {
    let requests: Vec<Vec<u32>> = (0..512)
        .map(|i| prompt(i % GROUPS, 5_000_000 + i))
        .collect();
    let mut tails = Vec::new();
    let mut g = cr.benchmark_group("pick");
    for n in [8usize, 64, 512, 1000, 4000] {
        let ws = workers(n);
        for (name, policy) in policies(16) {
            fill(policy.as_ref(), &ws);
            let mut i = 0;
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    i = (i + 1) % requests.len();
                    let req = RouteRequest {
                        prompt_ids: &requests[i],
                        session_key: None,
                    };
                    black_box(select(
                        policy.as_ref(),
                        black_box(&req),
                        &ws.available(),
                        &[],
                    ))
                })
            });
            let (p50, p99) = pick_tail(policy.as_ref(), &ws, &requests);
            tails.push(format!("pick/{name}/{n}: p50 {p50:.1} µs, p99 {p99:.1} µs"));
        }
    }
    g.finish();
    for t in tails {
        println!("{t}");
    }
}

/// p50 and p99 of 20,000 single picks, in µs.
fn pick_tail(policy: &dyn Policy, ws: &Registry, requests: &[Vec<u32>]) -> (f64, f64) {
    let mut samples: Vec<u128> = (0..20_000)
        .map(|k| {
            let req = RouteRequest {
                prompt_ids: &requests[k % requests.len()],
                session_key: None,
            };
            let t = Instant::now();
            black_box(select(policy, &req, &ws.available(), &[]).ok());
            t.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    (at(0.5), at(0.99))
}

/// prefix_cost on the exact KV-event index: 64 workers holding 16,384 blocks each (1M blocks,
/// 16M tokens), each block stored through a `BlockStored` event as a subscriber applies it.
fn bench_pick_kv_events(cr: &mut Criterion) {
    const WORKERS: u32 = 64;
    const PROMPTS_PER_WORKER: u32 = 128; // × 128 pages of 16 tokens
    let rss_before = rss_bytes();
    let kv = Arc::new(KvIndex::new(16, 2 << 20));
    let mut engine_hash = 0i64;
    for w in 0..WORKERS {
        kv.open_view(WorkerId(w), 0, usize::MAX);
        kv.mark_fresh(WorkerId(w), 0, Instant::now());
        for k in 0..PROMPTS_PER_WORKER {
            let ids = prompt(w * PROMPTS_PER_WORKER + k, 0);
            let pages = 2048 / 16;
            let ev = Stored {
                hashes: (0..pages).map(|i| engine_hash + i).collect(),
                parent: None,
                token_ids: ids[..2048].to_vec(),
                block_size: 16,
                device_tier: true,
            };
            engine_hash += pages;
            kv.store(WorkerId(w), 0, &ev);
        }
    }
    assert_eq!(kv.entries(), 1 << 20);
    let per_block = rss_bytes().saturating_sub(rss_before) as f64 / f64::from(1 << 20);
    let ws = workers(WORKERS as usize);
    let policy = PrefixCost::new(1.0, 256.0, PrefixIndex::new(16, INDEXED)).with_kv_index(Some(kv));
    fill(&policy, &ws);
    let requests: Vec<Vec<u32>> = (0..512)
        .map(|i| prompt((i * 37) % (WORKERS * PROMPTS_PER_WORKER), 5_000_000 + i))
        .collect();
    let mut g = cr.benchmark_group("pick_kv_events");
    let mut i = 0;
    g.bench_function(BenchmarkId::new("prefix_cost", WORKERS), |b| {
        b.iter(|| {
            i = (i + 1) % requests.len();
            let req = RouteRequest {
                prompt_ids: &requests[i],
                session_key: None,
            };
            black_box(select(&policy, black_box(&req), &ws.available(), &[]))
        })
    });
    g.finish();
    let (p50, p99) = pick_tail(&policy, &ws, &requests);
    println!("pick_kv_events/prefix_cost/{WORKERS} (1M blocks): p50 {p50:.1} µs, p99 {p99:.1} µs");
    println!("kv index memory: {per_block:.0} bytes per indexed block (resident set growth)");
}

/// This process's resident set (Linux), 0 elsewhere.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn bench_index(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("prefix_index");
    for size in [100_000usize, 1 << 20, 4 << 20] {
        let idx = PrefixIndex::new(16, size);
        let mut q = 0u32;
        while idx.size().tokens < size * 9 / 10 {
            idx.insert(&idx.page_hashes(&prompt(q % GROUPS, q)), WorkerId(q % 8));
            q += 1;
        }
        let hit = prompt(3, 7_000_000);
        let hashes = idx.page_hashes(&hit);
        idx.insert(&hashes, WorkerId(1));
        g.bench_function(BenchmarkId::new("hash_2176", size), |b| {
            b.iter(|| black_box(idx.page_hashes(black_box(&hit))))
        });
        g.bench_function(BenchmarkId::new("match_2176", size), |b| {
            b.iter(|| black_box(idx.match_pages(black_box(&hashes))))
        });
        g.bench_function(BenchmarkId::new("insert_2176", size), |b| {
            b.iter(|| idx.insert(black_box(&hashes), WorkerId(2)))
        });
        // Prompts never seen before into the full index: each page is a new entry and pushes
        // out an old one (a stream of unique long prompts). Enough distinct prompts that each
        // has left the index before it comes round again.
        let unique: Vec<Vec<u64>> = (0..(2 * size / 2176 + 64) as u32)
            .map(|i| idx.page_hashes(&prompt(GROUPS + 1 + i, i)))
            .collect();
        let mut next = unique.iter().cycle();
        g.bench_function(BenchmarkId::new("insert_unique_2176", size), |b| {
            b.iter(|| {
                if let Some(hashes) = next.next() {
                    idx.insert(black_box(hashes), WorkerId(3));
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_pick, bench_pick_kv_events, bench_index);
criterion_main!(benches);
