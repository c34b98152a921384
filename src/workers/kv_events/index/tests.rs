use super::*;

const B: usize = 4;

/// Stored events for `tokens`' whole pages, engine hashes `base + page`, one event per page.
fn stored(tokens: &[u32], base: i64) -> Vec<Stored> {
    tokens
        .chunks_exact(B)
        .enumerate()
        .map(|(i, page)| Stored {
            hashes: vec![base + i as i64],
            parent: (i > 0).then(|| base + i as i64 - 1),
            token_ids: page.to_vec(),
            block_size: B,
            device_tier: true,
        })
        .collect()
}

fn fresh(idx: &KvIndex, w: u32, capacity: usize) {
    idx.open_view(WorkerId(w), 0, capacity);
    idx.mark_fresh(WorkerId(w), 0, Instant::now());
}

fn cached(idx: &KvIndex, prompt: &[u32], w: u32) -> Option<usize> {
    idx.lookup(prompt, None)?.cached_tokens(WorkerId(w))
}

#[test]
fn matches_stored_pages_and_forgets_removed_ones() {
    let idx = KvIndex::new(B, 1000);
    fresh(&idx, 1, 100);
    fresh(&idx, 2, 100);
    let prompt: Vec<u32> = (0..14).collect();
    for ev in stored(&prompt[..12], 100) {
        assert_eq!(idx.store(WorkerId(1), 0, &ev), Applied::Indexed);
    }
    assert_eq!(cached(&idx, &prompt, 1), Some(12));
    assert_eq!(cached(&idx, &prompt, 2), Some(0));
    assert_eq!(cached(&idx, &prompt, 3), None, "no view: not covered");
    // The last page evicted; then the middle one: the match stops at the gap.
    idx.remove(WorkerId(1), 0, &[102]);
    assert_eq!(cached(&idx, &prompt, 1), Some(8));
    idx.remove(WorkerId(1), 0, &[101]);
    assert_eq!(cached(&idx, &prompt, 1), Some(4));
    // A block whose parent is unknown is an orphan; a repeated one is known.
    let evs = stored(&prompt[..12], 100);
    assert_eq!(idx.store(WorkerId(1), 0, &evs[2]), Applied::Orphan);
    assert_eq!(idx.store(WorkerId(1), 0, &evs[0]), Applied::Known);
    idx.clear_view(WorkerId(1), 0);
    assert_eq!((cached(&idx, &prompt, 1), idx.entries()), (Some(0), 0));
}

#[test]
fn merged_events_and_other_tiers() {
    let idx = KvIndex::new(B, 1000);
    fresh(&idx, 1, 100);
    let prompt: Vec<u32> = (0..8).collect();
    let merged = Stored {
        hashes: vec![1, 2],
        parent: None,
        token_ids: prompt.clone(),
        block_size: B,
        device_tier: true,
    };
    let host = Stored {
        device_tier: false,
        ..merged.clone()
    };
    assert_eq!(idx.store(WorkerId(1), 0, &host), Applied::Skipped);
    assert_eq!(cached(&idx, &prompt, 1), Some(0));
    assert_eq!(idx.store(WorkerId(1), 0, &merged), Applied::Indexed);
    assert_eq!(cached(&idx, &prompt, 1), Some(8));
}

#[test]
fn stale_views_are_not_covered_until_rebuilt_and_removed_workers_go() {
    let idx = KvIndex::new(B, 1000);
    fresh(&idx, 1, 100);
    let prompt: Vec<u32> = (0..8).collect();
    for ev in stored(&prompt, 0) {
        idx.store(WorkerId(1), 0, &ev);
    }
    idx.mark_stale(WorkerId(1), 0, Duration::from_secs(60));
    assert!(idx.lookup(&prompt, None).is_none());
    assert_eq!(idx.entries(), 0);
    idx.mark_stale(WorkerId(1), 0, Duration::ZERO);
    assert_eq!(cached(&idx, &prompt, 1), Some(0));
    for ev in stored(&prompt, 0) {
        idx.store(WorkerId(1), 0, &ev);
    }
    idx.drop_worker(WorkerId(1));
    assert!(idx.lookup(&prompt, None).is_none());
    assert_eq!(idx.entries(), 0);
}

#[test]
fn memory_stays_within_capacity_and_cap() {
    // A view past its worker's KV capacity is out of step with the engine: cleared.
    let idx = KvIndex::new(B, 1000);
    fresh(&idx, 1, 3);
    let prompt: Vec<u32> = (0..16).collect();
    let evs = stored(&prompt, 0);
    for ev in &evs[..3] {
        assert_eq!(idx.store(WorkerId(1), 0, ev), Applied::Indexed);
    }
    assert_eq!(idx.store(WorkerId(1), 0, &evs[3]), Applied::Overflow);
    assert_eq!(idx.entries(), 0);
    // The global cap bounds all views together.
    let idx = KvIndex::new(B, 10);
    for w in 0..4 {
        fresh(&idx, w, 1_000);
        let prompt: Vec<u32> = (0..16).map(|t| t + 100 * w).collect();
        for ev in stored(&prompt, 1000 * i64::from(w)) {
            idx.store(WorkerId(w), 0, &ev);
            assert!(idx.entries() <= 10);
        }
    }
}

#[test]
fn speculation_bridges_until_the_event_and_expires() {
    let idx = KvIndex::new(B, 1000);
    fresh(&idx, 1, 100);
    fresh(&idx, 2, 100);
    let prompt: Vec<u32> = (0..8).collect();
    let m = idx.lookup(&prompt, None).unwrap();
    idx.speculate(&m, WorkerId(2));
    assert_eq!(cached(&idx, &prompt, 2), Some(8));
    assert_eq!(cached(&idx, &prompt, 1), Some(0));
    // The event replaces the speculation.
    for ev in stored(&prompt, 0) {
        idx.store(WorkerId(2), 0, &ev);
    }
    idx.remove(WorkerId(2), 0, &[1]);
    assert_eq!(cached(&idx, &prompt, 2), Some(4));
}

#[test]
fn speculation_stays_within_its_cap_and_credits_a_prefix() {
    // Cap 40 blocks: at most 10 speculative credits.
    let idx = KvIndex::new(B, 40);
    fresh(&idx, 1, 100);
    assert_eq!(idx.max_speculative(), 10);
    for p in 0..5u32 {
        let prompt: Vec<u32> = (0..16).map(|t| t + 1000 * p).collect();
        let m = idx.lookup(&prompt, None).unwrap();
        idx.speculate(&m, WorkerId(1));
        assert!(idx.speculative() <= 10);
        assert!(idx.distinct_keys() <= idx.entries() + idx.speculative());
    }
    // Prompts 0 and 1 fit (4 pages each), prompt 2 got its first two pages, later ones none.
    let credited: Vec<Option<usize>> = (0..4u32)
        .map(|p| cached(&idx, &(0..16).map(|t| t + 1000 * p).collect::<Vec<_>>(), 1))
        .collect();
    assert_eq!(credited, [Some(16), Some(16), Some(8), Some(0)]);
}

#[test]
fn a_worker_with_dp_ranks_matches_its_best_rank() {
    let idx = KvIndex::new(B, 1000);
    for rank in 0..2 {
        idx.open_view(WorkerId(1), rank, 100);
        idx.mark_fresh(WorkerId(1), rank, Instant::now());
    }
    let prompt: Vec<u32> = (0..16).collect();
    let evs = stored(&prompt, 0);
    idx.store(WorkerId(1), 0, &evs[0]);
    for ev in &evs[..3] {
        idx.store(WorkerId(1), 1, ev);
    }
    assert_eq!(cached(&idx, &prompt, 1), Some(12));
    // One rank evicting a block the other still holds changes nothing for the other.
    idx.remove(WorkerId(1), 0, &[0]);
    assert_eq!(cached(&idx, &prompt, 1), Some(12));
    assert_eq!(idx.entries(), 3);
}

#[test]
fn a_new_view_does_not_inherit_a_dropped_workers_speculation() {
    let idx = KvIndex::new(B, 1000);
    fresh(&idx, 1, 100);
    let prompt: Vec<u32> = (0..8).collect();
    let m = idx.lookup(&prompt, None).unwrap();
    idx.speculate(&m, WorkerId(1));
    idx.drop_worker(WorkerId(1));
    fresh(&idx, 2, 100);
    assert_eq!(cached(&idx, &prompt, 2), Some(0));
}

#[test]
fn matches_past_sixty_four_views() {
    let idx = KvIndex::new(B, 10_000);
    for w in 0..70 {
        fresh(&idx, w, 100);
    }
    let prompt: Vec<u32> = (0..12).collect();
    let evs = stored(&prompt, 0);
    for ev in &evs {
        idx.store(WorkerId(69), 0, ev);
    }
    idx.store(WorkerId(3), 0, &evs[0]);
    idx.store(WorkerId(66), 0, &stored(&prompt, 100)[0]);
    assert_eq!(cached(&idx, &prompt, 69), Some(12));
    assert_eq!(cached(&idx, &prompt, 66), Some(4));
    assert_eq!(cached(&idx, &prompt, 3), Some(4));
    assert_eq!(cached(&idx, &prompt, 0), Some(0));
}

#[test]
fn each_worker_matches_its_own_depth() {
    // Workers holding 0, 1, 3, 7, 10 and all 16 pages of one prompt, and one with a speculative
    // credit past its 2 held pages: the bisecting walk finds every depth.
    let idx = KvIndex::new(B, 10_000);
    let prompt: Vec<u32> = (0..16 * B as u32).collect();
    let evs = stored(&prompt, 0);
    for (w, held) in [
        (0u32, 0usize),
        (1, 1),
        (2, 3),
        (3, 7),
        (4, 10),
        (5, 16),
        (6, 2),
    ] {
        fresh(&idx, w, 100);
        for ev in &evs[..held] {
            idx.store(WorkerId(w), 0, ev);
        }
    }
    let short: Vec<u32> = prompt[..12 * B].to_vec();
    let m = idx.lookup(&short, None).unwrap();
    idx.speculate(&m, WorkerId(6));
    let depths: Vec<Option<usize>> = (0..7).map(|w| cached(&idx, &prompt, w)).collect();
    let pages = |n: usize| Some(n * B);
    assert_eq!(
        depths,
        [
            pages(0),
            pages(1),
            pages(3),
            pages(7),
            pages(10),
            pages(16),
            pages(12)
        ]
    );
}
