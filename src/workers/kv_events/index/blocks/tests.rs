use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::workers::page_key::mix64;

/// The walk as it was before probes went together: one lookup at a time, each waiting for the
/// one before. The oracle for `walk`.
fn walk_one_by_one(b: &Blocks, keys: &[u64], start: &SlotSet, now: u32, depth: &mut [u32]) {
    let mut alive = start.clone();
    let mut here = SlotSet::with_capacity(depth.len());
    let mut record = |slot: usize, d: usize| depth[slot] = d as u32;
    let mut matched = 0;
    while matched < keys.len() && !alive.is_empty() {
        let all_match = |page: usize, here: &mut SlotSet| {
            keys.get(page).is_some_and(|k| {
                b.slots_at(*k, now, here);
                alive.is_subset(here)
            })
        };
        if all_match(matched, &mut here) {
            let (mut good, mut step) = (matched, 1);
            let mut bad = loop {
                let probe = good + step;
                if probe >= keys.len() {
                    break keys.len();
                }
                if !all_match(probe, &mut here) {
                    break probe;
                }
                good = probe;
                step *= 2;
            };
            while bad - good > 1 {
                let mid = good + (bad - good) / 2;
                if all_match(mid, &mut here) {
                    good = mid;
                } else {
                    bad = mid;
                }
            }
            matched = good + 1;
            continue;
        }
        b.slots_at(keys[matched], now, &mut here);
        alive.retain_into(&here, |slot| record(slot, matched));
    }
    alive.retain_into(&SlotSet::default(), |slot| record(slot, matched));
}

/// Views holding prefixes (as engines do) and arbitrary page sets (as expired speculation in
/// the middle of a prefix can leave), up to 70 views (two words of slots), speculative marks
/// live and expired: the walk reaches the depths the one-by-one walk does.
#[test]
fn probing_pages_together_reaches_the_one_by_one_depths() {
    let mut rng = SmallRng::seed_from_u64(15);
    for round in 0..400u64 {
        let pages = rng.random_range(1..160usize);
        let keys: Vec<u64> = (0..pages as u64).map(|p| mix64(round << 32 | p)).collect();
        let slots = rng.random_range(1..70usize);
        let now = 1000;
        let mut b = Blocks::default();
        for s in 0..slots {
            let slot = s as Slot;
            let held = rng.random_range(0..=pages);
            let prefix = rng.random_bool(0.6);
            for (p, key) in keys.iter().enumerate() {
                if if prefix {
                    p < held
                } else {
                    rng.random_bool(0.8)
                } {
                    b.hold(*key, slot, |_| false);
                } else if rng.random_bool(0.1) {
                    let deadline = if rng.random_bool(0.5) {
                        now + 5
                    } else {
                        now - 5
                    };
                    b.speculate(*key, slot, deadline, now - 10, usize::MAX);
                }
            }
        }
        let mut start = SlotSet::with_capacity(slots);
        for s in 0..slots {
            if rng.random_bool(0.9) {
                start.insert(s as Slot);
            }
        }
        let (mut got, mut want) = (vec![0; slots], vec![0; slots]);
        b.walk(&keys, &start, now, &mut got);
        walk_one_by_one(&b, &keys, &start, now, &mut want);
        assert_eq!(got, want, "round {round}: {pages} pages, {slots} views");
    }
}
