use super::*;

fn prompt(group: u32, len: usize, tail: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..len as u32).map(|t| group * 100_000 + t).collect();
    v.extend((0..37).map(|t| 900_000 + tail * 100 + t));
    v
}

#[test]
fn matches_whole_pages_per_worker() {
    let idx = PrefixIndex::new(16, 1 << 20);
    let a = prompt(1, 64, 0);
    idx.insert(&idx.page_hashes(&a), WorkerId(3));
    // 64 shared + 32 of the 37 tail tokens fill 6 pages; the other worker holds 4 of them.
    idx.insert(&idx.page_hashes(&a[..64]), WorkerId(1));
    let b = prompt(1, 64, 1);
    let m = idx.match_pages(&idx.page_hashes(&b));
    assert_eq!(m, vec![(WorkerId(1), 4), (WorkerId(3), 4)]);
    let m = idx.match_pages(&idx.page_hashes(&a));
    assert_eq!(pages_for(&m, WorkerId(3)), 6);
    assert_eq!(pages_for(&m, WorkerId(1)), 4);
    assert_eq!(pages_for(&m, WorkerId(2)), 0);
    // A different first page matches nothing even if later tokens agree.
    let mut c = a.clone();
    c[0] = 7;
    assert!(idx.match_pages(&idx.page_hashes(&c)).is_empty());
    assert_eq!(idx.size().pages, 6);
    assert_eq!(idx.size().tokens, 10 * 16);
}

#[test]
fn remove_worker_forgets_it() {
    let idx = PrefixIndex::new(16, 1 << 20);
    let a = prompt(2, 128, 0);
    let h = idx.page_hashes(&a);
    idx.insert(&h, WorkerId(0));
    idx.insert(&h, WorkerId(1));
    idx.remove_worker(WorkerId(0));
    assert_eq!(idx.match_pages(&h), vec![(WorkerId(1), h.len())]);
    idx.retain_live(&[WorkerId(5)]);
    assert_eq!(idx.size(), IndexSize::default());
}

#[test]
fn budget_holds_under_a_long_stream_and_keeps_hot_prefixes() {
    let idx = PrefixIndex::new(16, 100_000);
    let hot = prompt(0, 512, 0);
    let mut inserted = 0;
    for i in 0..1000u32 {
        // Unique 1k-token prompts: a 1M-token stream through a 100k-token budget.
        let cold = prompt(i + 1, 1000, i);
        idx.insert(&idx.page_hashes(&cold), WorkerId(i % 4));
        inserted += cold.len();
        idx.insert(&idx.page_hashes(&hot), WorkerId(0));
        assert!(idx.size().tokens <= 100_000);
    }
    assert!(inserted >= 1_000_000);
    assert!(idx.size().tokens > 50_000, "{:?}", idx.size());
    let m = idx.match_pages(&idx.page_hashes(&hot));
    assert_eq!(pages_for(&m, WorkerId(0)), 512 / 16 + 2);
}

#[test]
fn periodic_mode_overshoots_until_swept() {
    let idx = PrefixIndex::new(16, 16 * 32 * 10).with_periodic_eviction();
    for i in 0..200u32 {
        idx.insert(&idx.page_hashes(&prompt(i, 160, i)), WorkerId(0));
    }
    assert!(idx.size().tokens <= 2 * idx.budget_tokens());
    idx.evict();
    assert!(idx.size().tokens <= idx.budget_tokens());
}

/// Insert as it was before a shard's pages went in under one lock: page by page, deepest
/// first, each under its own shard's lock. The oracle for `insert`.
fn insert_one_by_one(idx: &PrefixIndex, hashes: &[u64], worker: WorkerId) {
    for key in hashes.iter().rev() {
        let mut shard = idx.shards[shard_of(*key)].lock().unwrap();
        idx.add(&mut shard, *key, worker);
    }
}

/// A match page by page from the first, stopping at the first page nobody holds: the oracle
/// for `match_pages` where workers hold whole prefixes.
fn match_one_by_one(idx: &PrefixIndex, hashes: &[u64]) -> Vec<(WorkerId, usize)> {
    let mut out: Vec<(WorkerId, usize)> = Vec::new();
    for (depth, key) in hashes.iter().enumerate() {
        let shard = idx.shards[shard_of(*key)].lock().unwrap();
        let Some(holders) = shard.pages.get(*key) else {
            break;
        };
        if depth == 0 {
            out.extend(holders.iter().map(|e| (e.0, 1)));
            continue;
        }
        let mut alive = 0;
        for entry in out.iter_mut().filter(|e| e.1 == depth) {
            if holders.iter().any(|h| h.0 == entry.0) {
                entry.1 += 1;
                alive += 1;
            }
        }
        if alive == 0 {
            break;
        }
    }
    out
}

/// Each shard's (page, worker) entries in eviction order (empties the index).
fn drain_in_eviction_order(idx: &PrefixIndex) -> Vec<Vec<(u64, WorkerId)>> {
    idx.shards
        .iter()
        .map(|m| {
            let mut shard = m.lock().unwrap();
            std::iter::from_fn(|| shard.recency.evict_one()).collect()
        })
        .collect()
}

/// Whether `worker` holds page `key`.
fn holds(idx: &PrefixIndex, key: u64, worker: WorkerId) -> bool {
    idx.holders_of(key).contains(&worker)
}

/// What bisection must find when a worker's pages of a prompt may have holes (evictions from
/// one shard and not another): the holders of the first page, each matched to a page it
/// holds, at least as deep as the walk from the first page reaches. Returns how many went deeper
/// (past a hole).
fn assert_a_sound_match(idx: &PrefixIndex, hashes: &[u64], at: &str) -> usize {
    let found = idx.match_pages(hashes);
    let walked = match_one_by_one(idx, hashes);
    let first: Vec<WorkerId> = hashes
        .first()
        .map_or(Vec::new(), |k| idx.holders_of(*k).to_vec());
    let workers: Vec<WorkerId> = found.iter().map(|e| e.0).collect();
    assert_eq!(workers, first, "{at}");
    for &(w, depth) in &found {
        assert!(holds(idx, hashes[depth - 1], w), "{at}: {w:?} at {depth}");
        assert!(
            depth >= pages_for(&walked, w),
            "{at}: {w:?} at {depth}, walk {walked:?}"
        );
    }
    found
        .iter()
        .filter(|e| e.1 > pages_for(&walked, e.0))
        .count()
}

/// Without evictions every worker holds whole prefixes of what it was sent, and bisection finds
/// exactly what the page-by-page walk finds: prompts of many lengths sharing prefixes of many
/// lengths, on several workers.
#[test]
fn bisection_finds_what_a_walk_from_the_first_page_finds() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(15);
    let idx = PrefixIndex::new(16, 1 << 24);
    for i in 0..2000u32 {
        let len = rng.random_range(0..1200);
        let ids = prompt(rng.random_range(0..12), len, rng.random_range(0..30));
        let hashes = idx.page_hashes(&ids);
        assert_eq!(
            idx.match_pages(&hashes),
            match_one_by_one(&idx, &hashes),
            "request {i}"
        );
        // Sometimes only a leading part, so one prompt's workers end at different depths.
        let sent = rng.random_range(0..=hashes.len());
        idx.insert(&hashes[..sent], WorkerId(rng.random_range(0..9)));
    }
    assert!(idx.size().entries > 5_000, "{:?}", idx.size());
}

/// Shared prefixes of several lengths on several workers through a budget small enough to evict
/// all along: the grouped insert leaves what a page-by-page one would, down to each shard's
/// recency order, and every match is sound.
#[test]
fn grouping_pages_by_shard_changes_no_eviction() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(21);
    let grouped = PrefixIndex::new(16, 40_000);
    let paged = PrefixIndex::new(16, 40_000);
    let mut past_holes = 0;
    for i in 0..1500u32 {
        let group = rng.random_range(0..40);
        let len = rng.random_range(0..1200);
        let ids = prompt(group, len, rng.random_range(0..20));
        let hashes = grouped.page_hashes(&ids);
        past_holes += assert_a_sound_match(&grouped, &hashes, &format!("request {i}"));
        let worker = WorkerId(rng.random_range(0..6));
        grouped.insert(&hashes, worker);
        insert_one_by_one(&paged, &hashes, worker);
        assert_eq!(grouped.size(), paged.size(), "request {i}");
    }
    assert!(grouped.size().tokens > 30_000, "{:?}", grouped.size());
    // The budget leaves holes, so the soundness checks above met some.
    assert!(past_holes > 0);
    assert_eq!(
        drain_in_eviction_order(&grouped),
        drain_in_eviction_order(&paged)
    );
}
