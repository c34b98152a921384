//! Radix cache match / insert cost at 100k and 1M cached tokens.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on a broken setup

#[path = "common/allocator.rs"]
mod allocator;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use switchboard::sim::radix::RadixCache;

const SEQ: usize = 1000;
const SHARED: usize = 200;

/// Sequence `i`: a 200-token prefix shared by groups of 10, then unique tokens.
fn sequence(i: usize) -> Vec<u32> {
    let group = (i / 10) as u32;
    let mut v: Vec<u32> = (0..SHARED as u32).map(|t| group * 1_000_000 + t).collect();
    v.extend((0..(SEQ - SHARED) as u32).map(|t| 500_000_000 + i as u32 * 10_000 + t));
    v
}

fn filled(tokens: usize) -> (RadixCache, usize) {
    let mut c = RadixCache::new(1);
    let mut i = 0;
    while c.cached_tokens() < tokens {
        c.insert(&sequence(i));
        i += 1;
    }
    (c, i)
}

fn bench(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("radix");
    g.throughput(Throughput::Elements(SEQ as u64));
    for size in [100_000usize, 1_000_000] {
        let (mut c, n) = filled(size);
        let hit = sequence(n / 2);
        // Group 0's shared prefix, then an unseen tail: a 200-of-1000 hit.
        let mut partial = sequence(0)[..SHARED].to_vec();
        partial.extend(sequence(n + 7)[SHARED..].iter().copied());
        g.bench_function(BenchmarkId::new("match_hit_1k", size), |b| {
            b.iter(|| black_box(c.match_prefix(black_box(&hit))))
        });
        g.bench_function(BenchmarkId::new("match_partial_200_of_1k", size), |b| {
            b.iter(|| black_box(c.match_prefix(black_box(&partial))))
        });
        g.bench_function(BenchmarkId::new("insert_existing_1k", size), |b| {
            b.iter(|| black_box(c.insert(black_box(&hit))))
        });
        let mut next = n + 100;
        g.bench_function(
            BenchmarkId::new("insert_new_1k_plus_evict_lru", size),
            |b| {
                b.iter(|| {
                    next += 1;
                    c.insert(&sequence(next));
                    black_box(c.evict(SEQ - SHARED))
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
