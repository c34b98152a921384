use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// Every page-aligned prefix stored in the tree.
fn content(c: &RadixCache) -> BTreeSet<Vec<u32>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![(ROOT, Vec::new())];
    while let Some((node, prefix)) = stack.pop() {
        for &child in c.nodes[node].children.values() {
            let mut p = prefix.clone();
            for page in c.nodes[child].key.chunks(c.page) {
                p.extend_from_slice(page);
                out.insert(p.clone());
            }
            stack.push((child, p));
        }
    }
    out
}

fn longest_in(set: &BTreeSet<Vec<u32>>, q: &[u32], page: usize) -> usize {
    (1..=q.len() / page)
        .rev()
        .map(|k| k * page)
        .find(|&n| set.contains(&q[..n]))
        .unwrap_or(0)
}

fn seq(r: std::ops::Range<u32>) -> Vec<u32> {
    r.collect()
}

#[test]
fn insert_and_match_split_edges() {
    let mut c = RadixCache::new(1);
    assert_eq!(c.insert(&seq(0..100)), 100);
    assert_eq!(c.node_count(), 1);
    let mut other = seq(0..40);
    other.extend(1000..1010);
    assert_eq!(c.insert(&other), 10);
    assert_eq!(c.node_count(), 3);
    assert_eq!(c.cached_tokens(), 110);
    assert_eq!(c.match_prefix(&seq(0..100)).0, 100);
    assert_eq!(c.match_prefix(&seq(0..20)).0, 20);
    assert_eq!(c.node_count(), 4, "match split the 0..40 edge at 20");
    assert_eq!(c.match_prefix(&other).0, 50);
    assert_eq!(c.match_prefix(&[7, 8]).0, 0);
    assert_eq!(c.peek_prefix(&seq(0..70)), 70);
    assert_eq!(c.insert(&seq(0..100)), 0);
    assert_eq!(c.cached_tokens(), 110);
}

#[test]
fn long_run_is_one_node() {
    let mut c = RadixCache::new(1);
    c.insert(&seq(0..1_000_000));
    assert_eq!(c.node_count(), 1);
    assert_eq!(c.cached_tokens(), 1_000_000);
}

#[test]
fn page_alignment() {
    let mut c = RadixCache::new(4);
    assert_eq!(c.insert(&seq(0..10)), 8);
    assert_eq!(c.match_prefix(&seq(0..10)).0, 8);
    assert_eq!(c.match_prefix(&seq(0..7)).0, 4);
    let mut q = seq(0..6);
    q.extend([99, 99]);
    assert_eq!(
        c.match_prefix(&q).0,
        4,
        "divergence inside a page rounds down"
    );
    assert_eq!(c.insert(&q), 4);
    assert_eq!(c.cached_tokens(), 12);
    assert_eq!(c.peek_prefix(&q), 8);
}

#[test]
fn lru_eviction_and_locks() {
    let mut c = RadixCache::new(1);
    c.insert(&seq(0..100)); // oldest
    c.insert(&seq(1000..1100));
    c.insert(&seq(2000..2100));
    let (_, h) = c.match_prefix(&seq(0..100)); // now newest, and locked
    c.lock(h);
    assert_eq!(c.evictable_tokens(), 200);
    assert_eq!(c.protected_tokens(), 100);
    assert_eq!(c.evict(50), 100, "whole leaf 1000..1100 goes first");
    assert_eq!(c.peek_prefix(&seq(1000..1100)), 0);
    assert_eq!(c.peek_prefix(&seq(2000..2100)), 100);
    assert_eq!(c.evict(1000), 100);
    assert_eq!(c.cached_tokens(), 100);
    assert_eq!(c.evict(1000), 0, "locked path survives");
    assert_eq!(c.peek_prefix(&seq(0..100)), 100);
    c.unlock(h);
    assert_eq!(c.evictable_tokens(), 100);
    assert_eq!(c.evict(1), 100);
    assert_eq!(c.cached_tokens(), 0);
    assert_eq!(c.node_count(), 0);
}

#[test]
fn lock_survives_split_and_parent_evicted_after_children() {
    let mut c = RadixCache::new(1);
    c.insert(&seq(0..100));
    let (n, h) = c.match_prefix(&seq(0..100));
    assert_eq!(n, 100);
    c.lock(h);
    // Splitting the locked edge keeps the whole path protected.
    let mut b = seq(0..30);
    b.push(500);
    c.insert(&b);
    assert_eq!(c.protected_tokens(), 100);
    assert_eq!(c.evict(usize::MAX), 1);
    c.unlock(h);
    assert_eq!(c.protected_tokens(), 0);
    assert_eq!(c.evict(usize::MAX), 100);
    assert_eq!(c.node_count(), 0);
}

#[test]
fn clear_resets() {
    let mut c = RadixCache::new(2);
    c.insert(&seq(0..10));
    c.clear();
    assert_eq!(c.cached_tokens(), 0);
    assert_eq!(c.match_prefix(&seq(0..10)).0, 0);
    assert_eq!(c.page_size(), 2);
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u32>),
    Match(Vec<u32>),
    LockMatch(Vec<u32>),
    Unlock,
    Evict(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let toks = || prop::collection::vec(0u32..3, 0..24);
    prop_oneof![
        4 => toks().prop_map(Op::Insert),
        2 => toks().prop_map(Op::Match),
        1 => toks().prop_map(Op::LockMatch),
        1 => Just(Op::Unlock),
        1 => (0usize..30).prop_map(Op::Evict),
    ]
}

proptest! {
    #[test]
    fn tree_matches_model(page in 1usize..4, ops in prop::collection::vec(op(), 1..60)) {
        let mut c = RadixCache::new(page);
        let mut model: BTreeSet<Vec<u32>> = BTreeSet::new();
        let mut locked: Vec<(NodeHandle, Vec<u32>)> = Vec::new();
        let mut evicted_ever = false;
        for op in ops {
            match op {
                Op::Insert(t) => {
                    let before = c.cached_tokens();
                    let added = c.insert(&t);
                    prop_assert_eq!(c.cached_tokens(), before + added);
                    for k in 1..=t.len() / page {
                        model.insert(t[..k * page].to_vec());
                    }
                }
                Op::Match(t) | Op::LockMatch(t) if t.is_empty() => {
                    prop_assert_eq!(c.match_prefix(&t).0, 0);
                }
                Op::Match(t) => {
                    let expect = longest_in(&content(&c), &t, page);
                    let (n, _) = c.match_prefix(&t);
                    prop_assert_eq!(n, expect);
                    prop_assert!(n <= longest_in(&model, &t, page));
                    prop_assert_eq!(n % page, 0);
                }
                Op::LockMatch(t) => {
                    let (n, h) = c.match_prefix(&t);
                    c.lock(h);
                    locked.push((h, t[..n].to_vec()));
                }
                Op::Unlock => {
                    if let Some((h, _)) = locked.pop() {
                        c.unlock(h);
                    }
                }
                Op::Evict(n) => {
                    let before = c.cached_tokens();
                    let freed = c.evict(n);
                    evicted_ever |= freed > 0;
                    prop_assert_eq!(c.cached_tokens(), before - freed);
                    if freed < n {
                        prop_assert_eq!(c.evictable_tokens(), 0);
                    }
                }
            }
            let have = content(&c);
            prop_assert!(have.is_subset(&model));
            if !evicted_ever {
                prop_assert_eq!(&have, &model);
            }
            prop_assert_eq!(c.cached_tokens(), have.len() * page);
            prop_assert_eq!(c.evictable_tokens() + c.protected_tokens(), c.cached_tokens());
            for (_, p) in &locked {
                prop_assert_eq!(c.peek_prefix(p), p.len());
            }
        }
    }
}

#[test]
fn recorded_events_follow_the_tree() {
    use crate::sim::kv_events::blocks::BlockEvent;
    let mut c = RadixCache::new(2);
    c.insert(&[7, 7]); // before recording: no event
    c.record_events();
    c.insert(&[1, 2, 3, 4]);
    c.insert(&[1, 2, 5, 6, 9]); // the partial page is not stored; [1, 2] is split off, not re-sent
    let ev = c.take_events();
    let stored: Vec<(i64, Option<i64>, Vec<u32>)> = ev
        .iter()
        .filter_map(|e| match e {
            BlockEvent::Stored {
                hash,
                parent,
                token_ids,
            } => Some((*hash, *parent, token_ids.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(stored.len(), 3, "{ev:?}");
    assert_eq!(stored[0].1, None);
    assert_eq!(stored[1].1, Some(stored[0].0));
    assert_eq!(
        (stored[2].1, stored[2].2.clone()),
        (Some(stored[0].0), vec![5, 6])
    );
    assert!(c.take_events().is_empty());
    // Evicting everything removes exactly what was stored (and the page from before recording).
    c.evict(100);
    let removed: Vec<i64> = c
        .take_events()
        .iter()
        .filter_map(|e| match e {
            BlockEvent::Removed { hash } => Some(*hash),
            _ => None,
        })
        .collect();
    assert_eq!(removed.len(), 4);
    for s in &stored {
        assert!(removed.contains(&s.0));
    }
    c.insert(&[3, 3]);
    c.clear();
    assert_eq!(c.take_events().last(), Some(&BlockEvent::Cleared));
}
