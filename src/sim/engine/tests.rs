mod cache;
mod speculative;

use super::*;
use std::collections::HashMap;

fn cfg(timing: TimingModel) -> EngineConfig {
    EngineConfig {
        timing,
        ..EngineConfig::default()
    }
}

fn toks(start: u32, n: usize) -> Vec<u32> {
    (start..start + n as u32).collect()
}

fn req(id: u64, prompt: Vec<u32>, out: usize) -> NewRequest {
    NewRequest {
        id: RequestId(id),
        prompt,
        output: toks(900_000 + id as u32 * 1000, out),
    }
}

/// KV books balance and never exceed the pool.
fn check(e: &Engine) {
    let private: usize = e.running.iter().map(|r| r.kv_len - r.shared).sum();
    let reserved: usize = e.running.iter().map(|r| r.remaining()).sum();
    assert_eq!(e.private_tokens, private);
    assert_eq!(e.reserved_tokens, reserved);
    assert!(e.radix.cached_tokens() + private + reserved <= e.cfg.kv_capacity_tokens);
    assert!(
        e.running
            .iter()
            .filter(|r| r.kv_len < r.req.prompt_len)
            .count()
            <= 1
    );
}

#[derive(Debug, Default)]
struct Trace {
    cached: usize,
    ttft_us: f64,
    itl_us: Vec<f64>,
    last_us: f64,
    produced: usize,
    finished: bool,
}

/// Runs `step()` until idle (requests submitted at model time 0) and returns
/// per-request TTFT / ITL in model time, plus the steps taken.
fn simulate(e: &mut Engine) -> (HashMap<RequestId, Trace>, Vec<(StepKind, f64)>) {
    let mut now = 0.0;
    let mut traces: HashMap<RequestId, Trace> = HashMap::new();
    let mut steps = Vec::new();
    while let Some(step) = e.step() {
        check(e);
        now += step.duration_us;
        steps.push((step.kind, step.duration_us));
        for ev in step.events {
            match ev {
                Event::Started { id, cached_tokens } => {
                    traces.entry(id).or_default().cached = cached_tokens
                }
                Event::Token {
                    id,
                    produced,
                    finished,
                } => {
                    let t = traces.entry(id).or_default();
                    // (Requests stepped before this call start mid-stream.)
                    assert!(produced == t.produced + 1 || t.produced == 0);
                    assert!(!t.finished);
                    if produced == 1 {
                        t.ttft_us = now;
                    } else {
                        t.itl_us.push(now - t.last_us);
                    }
                    (t.last_us, t.produced, t.finished) = (now, produced, finished);
                }
            }
        }
        assert!(steps.len() < 1_000_000, "runaway simulation");
    }
    assert!(e.is_idle());
    (traces, steps)
}

#[test]
fn itl_flat_up_to_knee_then_rising() {
    let knee = TimingModel::default().decode_batch_knee;
    let itl = |b: usize| {
        let mut e = Engine::new(cfg(TimingModel::default()));
        for i in 0..b as u64 {
            e.submit(req(i, toks(i as u32 * 100, 16), 8)).unwrap();
        }
        let (traces, _) = simulate(&mut e);
        assert_eq!(traces.len(), b);
        let t = &traces[&RequestId(0)];
        assert_eq!(t.itl_us.len(), 7);
        t.itl_us[3]
    };
    let base = itl(1);
    for b in [2, 8, 16, knee] {
        assert!((itl(b) - base) / base < 0.01, "B={b} not flat");
    }
    let mut prev = itl(knee);
    for b in [knee * 2, 128, 256] {
        let v = itl(b);
        assert!(v > prev * 1.1, "B={b}: {v} vs {prev}");
        prev = v;
    }
}

#[test]
fn prefill_stalls_running_decodes() {
    let mut e = Engine::new(cfg(TimingModel::default()));
    for i in 0..4 {
        e.submit(req(i, toks(i as u32 * 1000, 100), 50)).unwrap();
    }
    assert_eq!(e.step().unwrap().kind, StepKind::Prefill);
    let d = e.step().unwrap();
    assert_eq!(d.kind, StepKind::Decode);
    assert_eq!(d.events.len(), 4);
    e.submit(req(9, toks(50_000, 1000), 5)).unwrap();
    let p = e.step().unwrap();
    assert_eq!(p.kind, StepKind::Prefill);
    assert_eq!(
        p.events.len(),
        2,
        "Started + first token of the new request only"
    );
    assert!(p.events.iter().all(|ev| match ev {
        Event::Started { id, .. } | Event::Token { id, .. } => *id == RequestId(9),
    }));
    let d2 = e.step().unwrap();
    assert_eq!(d2.kind, StepKind::Decode);
    assert!(d2.events.contains(&Event::Token {
        id: RequestId(0),
        produced: 3,
        finished: false
    }));
    // Request 0's inter-token gap is the prefill plus the decode step.
    assert!(p.duration_us > d.duration_us * 2.0);
}

#[test]
fn abort_frees_slot_and_kv() {
    // Slot-bound.
    let mut e = Engine::new(EngineConfig {
        max_running_requests: 1,
        ..cfg(TimingModel::zero())
    });
    e.submit(req(1, toks(0, 50), 100)).unwrap();
    e.submit(req(2, toks(1000, 50), 100)).unwrap();
    e.step();
    assert_eq!(e.step().unwrap().kind, StepKind::Decode);
    assert_eq!(
        (e.loads().num_running_reqs, e.loads().num_waiting_reqs),
        (1, 1)
    );
    assert!(e.abort(RequestId(1)));
    assert!(!e.abort(RequestId(1)));
    let s = e.step().unwrap();
    assert_eq!(s.kind, StepKind::Prefill);
    assert!(s.events.contains(&Event::Started {
        id: RequestId(2),
        cached_tokens: 0
    }));
    // KV-bound.
    let mut e = Engine::new(EngineConfig {
        kv_capacity_tokens: 500,
        ..cfg(TimingModel::zero())
    });
    e.submit(req(1, toks(0, 300), 100)).unwrap();
    e.submit(req(2, toks(1000, 200), 100)).unwrap();
    e.step();
    assert_eq!(
        e.step().unwrap().kind,
        StepKind::Decode,
        "request 2 does not fit"
    );
    assert_eq!(e.loads().num_waiting_reqs, 1);
    assert!(e.abort(RequestId(1)));
    check(&e);
    assert_eq!(e.step().unwrap().kind, StepKind::Prefill);
    assert!(e.abort(RequestId(2)));
    assert!(e.is_idle());
    assert_eq!(e.loads().num_used_tokens, 0);
}

#[test]
fn loads_reflect_queue_and_uncached_work() {
    let mut e = Engine::new(EngineConfig {
        max_running_requests: 1,
        ..cfg(TimingModel::zero())
    });
    let sys = toks(0, 2048);
    e.submit(req(1, sys.clone(), 4)).unwrap();
    simulate(&mut e);
    e.submit(req(2, toks(10_000, 20_000), 4)).unwrap();
    e.step().unwrap(); // first 8192-token chunk of the blocker
    let mut warm = sys.clone();
    warm.extend(toks(50_000, 128));
    e.submit(req(3, warm, 4)).unwrap();
    e.submit(req(4, toks(60_000, 500), 4)).unwrap();
    let l = e.loads();
    assert_eq!(l.num_running_reqs, 1);
    assert_eq!(l.num_waiting_reqs, 2);
    assert_eq!(l.num_waiting_uncached_tokens, 128 + 500 + (20_000 - 8192));
    assert_eq!(l.num_used_tokens, 8192);
    assert_eq!(l.max_running_requests, 1);
    assert!((l.token_usage - 8192.0 / 2e6).abs() < 1e-12);
    assert_eq!(l.num_cached_tokens, 2052);
    simulate(&mut e);
    let l = e.loads();
    assert_eq!(
        (l.num_running_reqs, l.num_waiting_reqs, l.num_used_tokens),
        (0, 0, 0)
    );
    assert!(l.cache_hit_rate > 0.08 && l.cache_hit_rate < 0.1);
}

#[test]
fn long_prompt_is_chunked() {
    let mut e = Engine::new(cfg(TimingModel::default()));
    e.submit(req(1, toks(0, 20_000), 3)).unwrap();
    let s1 = e.step().unwrap();
    assert_eq!(
        s1.events,
        vec![Event::Started {
            id: RequestId(1),
            cached_tokens: 0
        }]
    );
    // A request arriving mid-prefill joins after the chunked one.
    e.submit(req(2, toks(100_000, 100), 2)).unwrap();
    let s2 = e.step().unwrap();
    assert_eq!((s2.kind, s2.events.len()), (StepKind::Prefill, 0));
    let s3 = e.step().unwrap();
    assert_eq!(s3.kind, StepKind::Prefill);
    assert!(s3.events.contains(&Event::Token {
        id: RequestId(1),
        produced: 1,
        finished: false
    }));
    assert!(s3.events.contains(&Event::Started {
        id: RequestId(2),
        cached_tokens: 0
    }));
    assert!(s1.duration_us > s3.duration_us, "3616 + 100 tokens < 8192");
    assert!(
        s2.duration_us > s1.duration_us,
        "later chunks attend to more context"
    );
    assert_eq!(e.loads().total_prefill_uncached_tokens, 20_100);
    assert_eq!(e.step().unwrap().kind, StepKind::Decode);
    simulate(&mut e);
}

#[test]
fn many_requests_under_pressure_complete() {
    let mut e = Engine::new(EngineConfig {
        kv_capacity_tokens: 6000,
        max_running_requests: 16,
        chunked_prefill_size: 512,
        page_size: 4,
        ..cfg(TimingModel::default())
    });
    for i in 0..200u64 {
        let shared = toks((i % 5) as u32 * 10_000, 300);
        let prompt = [
            shared,
            toks(100_000 + i as u32 * 100, 1 + (i as usize * 37) % 700),
        ]
        .concat();
        e.submit(req(i, prompt, 1 + (i as usize * 13) % 90))
            .unwrap();
    }
    let (t, steps) = simulate(&mut e);
    assert_eq!(t.len(), 200);
    assert!(t.values().all(|t| t.finished && t.cached % 4 == 0));
    assert!(t.values().filter(|t| t.cached >= 300).count() > 150);
    assert!(steps.iter().any(|s| s.0 == StepKind::Prefill));
    assert_eq!(e.loads().num_used_tokens, 0);
    assert!(e.flush_cache());
    assert_eq!(e.loads().num_cached_tokens, 0);
}

#[test]
fn submit_rejections() {
    let mut e = Engine::new(EngineConfig {
        context_length: 100,
        max_queued_requests: Some(1),
        kv_capacity_tokens: 90,
        ..cfg(TimingModel::zero())
    });
    let err = e.submit(req(1, toks(0, 100), 1)).unwrap_err();
    assert_eq!(
        err,
        Rejection::TooLong {
            prompt_tokens: 100,
            context_length: 100
        }
    );
    assert_eq!(
        err.to_string(),
        "The input (100 tokens) is longer than the model's context length (100 tokens)."
    );
    let err = e.submit(req(1, toks(0, 60), 41)).unwrap_err();
    assert!(matches!(err, Rejection::ExceedsContext { .. }));
    assert!(err.to_string().starts_with(
        "Requested token count exceeds the model's maximum context length of 100 tokens. You requested a total of 101 tokens"
    ));
    assert!(matches!(
        e.submit(req(1, toks(0, 60), 40)),
        Err(Rejection::ExceedsKvCapacity {
            needed: 100,
            capacity: 90
        })
    ));
    assert_eq!(e.submit(req(1, vec![], 1)), Err(Rejection::EmptyPrompt));
    assert_eq!(
        e.check_transferred(&req(1, toks(0, 5), 0)),
        Err(Rejection::EmptyOutput)
    );
    e.submit(req(1, toks(0, 5), 5)).unwrap();
    assert_eq!(e.submit(req(1, toks(0, 5), 5)), Err(Rejection::DuplicateId));
    assert_eq!(e.submit(req(2, toks(0, 5), 5)), Err(Rejection::QueueFull));
    assert_eq!(
        Rejection::QueueFull.to_string(),
        "The request queue is full."
    );
    assert!(!e.flush_cache(), "busy");
    e.step();
    e.submit(req(2, toks(0, 5), 5)).unwrap();
    simulate(&mut e);
    assert!(e.flush_cache());
    assert!(e.step().is_none());
}

/// `max_new_tokens: 0` (SGLang's prefill-only request): one prefill step with the prompt's
/// usual cost, then it ends with no token and no decode step; its prompt stays cached.
#[test]
fn prefill_only_request_ends_with_its_prefill() {
    let mut e = Engine::new(cfg(TimingModel::default()));
    e.submit(req(1, toks(0, 64), 0)).unwrap();
    let step = e.step().expect("a prefill step");
    assert_eq!(step.kind, StepKind::Prefill);
    assert_eq!(
        step.duration_us,
        TimingModel::default().prefill_us(64, TimingModel::attn_pairs(0, 64))
    );
    assert_eq!(
        step.events,
        vec![
            Event::Started {
                id: RequestId(1),
                cached_tokens: 0
            },
            Event::Token {
                id: RequestId(1),
                produced: 0,
                finished: true
            },
        ]
    );
    check(&e);
    assert!(e.is_idle() && e.step().is_none(), "no decode step");
    assert_eq!(e.loads().num_used_tokens, 0);
    assert_eq!(e.peek_cached(&toks(0, 64)), 64, "the prompt is cached");
    // A chunked prefill-only prompt ends with its last chunk only.
    let mut e = Engine::new(EngineConfig {
        chunked_prefill_size: 32,
        ..cfg(TimingModel::default())
    });
    e.submit(req(2, toks(1000, 80), 0)).unwrap();
    let kinds: Vec<_> = std::iter::from_fn(|| e.step())
        .map(|s| (s.kind, s.events.len()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (StepKind::Prefill, 1),
            (StepKind::Prefill, 0),
            (StepKind::Prefill, 1)
        ]
    );
}
