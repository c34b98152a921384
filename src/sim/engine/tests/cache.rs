//! Prefix-cache behaviour seen through the engine.

use super::*;

#[test]
fn eviction_is_lru_and_spares_locked_paths() {
    let mut e = Engine::new(EngineConfig {
        kv_capacity_tokens: 1300,
        ..cfg(TimingModel::zero())
    });
    let (a, b, l, x) = (
        toks(0, 400),
        toks(10_000, 400),
        toks(20_000, 300),
        toks(30_000, 250),
    );
    e.submit(req(1, a.clone(), 10)).unwrap();
    simulate(&mut e);
    e.submit(req(2, b.clone(), 10)).unwrap();
    simulate(&mut e);
    assert_eq!(e.loads().num_cached_tokens, 820);
    e.submit(req(3, l.clone(), 100)).unwrap();
    e.step().unwrap();
    e.step().unwrap();
    assert_eq!(
        e.loads().num_cached_tokens,
        1120,
        "L's prompt is cached and locked"
    );
    e.submit(req(4, x, 10)).unwrap();
    let s = e.step().unwrap();
    assert_eq!(s.kind, StepKind::Prefill);
    check(&e);
    assert_eq!(e.peek_cached(&a), 0, "A (least recently used) evicted");
    assert_eq!(e.peek_cached(&b), 400, "B survives");
    assert_eq!(e.peek_cached(&l), 300, "L's locked prompt survives");
    assert!(e.loads().num_cached_tokens < 1120);
    simulate(&mut e);
}

#[test]
fn warm_prefix_hits_and_is_five_times_faster() {
    for page in [1usize, 16] {
        let mut e = Engine::new(EngineConfig {
            page_size: page,
            ..cfg(TimingModel::default())
        });
        let sys = toks(0, 2048);
        let prompt = |tail: u32| [sys.clone(), toks(tail, 128)].concat();
        e.submit(req(1, prompt(100_000), 8)).unwrap();
        let (t1, s1) = simulate(&mut e);
        e.submit(req(2, prompt(200_000), 8)).unwrap();
        let (t2, s2) = simulate(&mut e);
        let (cold, warm) = (&t1[&RequestId(1)], &t2[&RequestId(2)]);
        assert_eq!(cold.cached, 0);
        assert!(warm.cached >= 2048 - page && warm.cached % page == 0);
        assert!(cold.ttft_us >= 5.0 * warm.ttft_us, "page {page}");
        assert!(s1[0].1 >= 5.0 * s2[0].1);
    }
}

#[test]
fn cached_never_covers_whole_prompt() {
    for (page, len, expect) in [
        (1usize, 5usize, 4usize),
        (16, 100, 96),
        (16, 97, 96),
        (16, 96, 80),
    ] {
        let mut e = Engine::new(EngineConfig {
            page_size: page,
            ..cfg(TimingModel::zero())
        });
        e.submit(req(1, toks(0, len), 3)).unwrap();
        simulate(&mut e);
        e.submit(req(2, toks(0, len), 3)).unwrap();
        let (t, _) = simulate(&mut e);
        assert_eq!(t[&RequestId(2)].cached, expect, "page {page} len {len}");
    }
}

#[test]
fn multi_turn_hits_previous_prompt_and_output() {
    let mut e = Engine::new(cfg(TimingModel::zero()));
    let first = req(1, toks(0, 300), 50);
    let mut second = [first.prompt.clone(), first.output.clone()].concat();
    second.extend(toks(5000, 20));
    e.submit(first).unwrap();
    simulate(&mut e);
    e.submit(req(2, second, 5)).unwrap();
    let (t, _) = simulate(&mut e);
    assert_eq!(t[&RequestId(2)].cached, 350);
}

/// A full cache evicts a batch (1/64 of the capacity) beyond what the next request lacks, so
/// the requests after it are admitted without another scan of the tree for leaves.
#[test]
fn a_full_cache_evicts_a_batch_beyond_the_shortfall() {
    let cap = 64 * 100;
    let mut e = Engine::new(EngineConfig {
        kv_capacity_tokens: cap,
        ..cfg(TimingModel::zero())
    });
    let mut id = 0;
    while e.free_tokens() >= 60 {
        id += 1;
        e.submit(req(id, toks(id as u32 * 1000, 50), 10)).unwrap();
        simulate(&mut e);
    }
    e.submit(req(id + 1, toks(999_000, 50), 10)).unwrap();
    simulate(&mut e);
    assert!(
        e.free_tokens() >= cap / 64,
        "{} tokens free after an eviction",
        e.free_tokens()
    );
}
