//! `Engine::step()` with 256 running requests and zero timing: emitted
//! tokens per second of CPU time. Finished requests are replaced at once, so
//! the figure includes the occasional prefill step and cache inserts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may panic on a broken setup

#[path = "common/allocator.rs"]
mod allocator;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use switchboard::sim::engine::{Engine, EngineConfig, Event, NewRequest, RequestId, TimingModel};

const B: usize = 256;

fn request(id: u64) -> NewRequest {
    let base = (id as u32).wrapping_mul(10_000);
    // A shared 64-token system prompt, a unique tail, outputs of 500–1500 tokens.
    let mut prompt: Vec<u32> = (0..64).collect();
    prompt.extend((0..200).map(|t| base + 1_000 + t));
    let out = 500 + (id as usize * 389) % 1000;
    NewRequest {
        id: RequestId(id),
        prompt,
        output: (0..out as u32).map(|t| base + 5_000 + t).collect(),
    }
}

fn bench(c: &mut Criterion) {
    let mut e = Engine::new(EngineConfig {
        max_running_requests: B,
        timing: TimingModel::zero(),
        ..EngineConfig::default()
    });
    let mut next = 0u64;
    for _ in 0..B {
        let _ = e.submit(request(next));
        next += 1;
    }
    while e.loads().num_waiting_reqs > 0 {
        e.step();
    }
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(B as u64));
    g.bench_function("step_b256_zero_timing", |b| {
        b.iter(|| {
            let Some(step) = e.step() else { return };
            for ev in &step.events {
                if let Event::Token { finished: true, .. } = ev {
                    let _ = e.submit(request(next));
                    next += 1;
                }
            }
            black_box(step.events.len());
        })
    });
    g.finish();
    let l = e.loads();
    println!(
        "after bench: running {} waiting {} cached {} generated {}",
        l.num_running_reqs, l.num_waiting_reqs, l.num_cached_tokens, l.total_generated_tokens
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
