//! The prefix index's recency list: which (page, worker) entry was inserted longest ago.

use crate::workers::WorkerId;

const NIL: usize = usize::MAX;

/// One (page, worker) entry's place in its shard's recency list.
struct Slot {
    key: u64,
    worker: WorkerId,
    prev: usize,
    next: usize,
}

/// A doubly-linked recency list over a slab: move-to-newest and evict-oldest are O(1) with no
/// allocation in steady state and no periodic compaction, so no request pays a sweep.
pub(super) struct Lru {
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Oldest.
    head: usize,
    /// Newest.
    tail: usize,
}

impl Default for Lru {
    fn default() -> Self {
        Lru {
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl Lru {
    pub(super) fn alloc(&mut self, key: u64, worker: WorkerId) -> usize {
        let slot = Slot {
            key,
            worker,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i) {
                    *s = slot;
                }
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.push_newest(i);
        i
    }

    fn push_newest(&mut self, i: usize) {
        let tail = self.tail;
        if let Some(s) = self.slots.get_mut(i) {
            s.prev = tail;
            s.next = NIL;
        }
        match self.slots.get_mut(tail) {
            Some(t) => t.next = i,
            None => self.head = i,
        }
        self.tail = i;
    }

    fn unlink(&mut self, i: usize) {
        let Some((prev, next)) = self.slots.get(i).map(|s| (s.prev, s.next)) else {
            return;
        };
        match self.slots.get_mut(prev) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.slots.get_mut(next) {
            Some(n) => n.prev = prev,
            None => self.tail = prev,
        }
    }

    pub(super) fn touch(&mut self, i: usize) {
        if self.tail != i {
            self.unlink(i);
            self.push_newest(i);
        }
    }

    pub(super) fn release(&mut self, i: usize) {
        self.unlink(i);
        self.free.push(i);
    }

    /// Unlinks the oldest entry and returns what it was.
    pub(super) fn pop_oldest(&mut self) -> Option<(u64, WorkerId)> {
        let i = self.head;
        let entry = self.slots.get(i).map(|s| (s.key, s.worker))?;
        self.release(i);
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_first_and_reuses_slots() {
        let mut lru = Lru::default();
        let a = lru.alloc(1, WorkerId(0));
        lru.alloc(2, WorkerId(0));
        let c = lru.alloc(3, WorkerId(1));
        lru.touch(a);
        assert_eq!(lru.pop_oldest(), Some((2, WorkerId(0))));
        lru.release(c);
        assert_eq!(lru.alloc(4, WorkerId(2)), c);
        assert_eq!(lru.pop_oldest(), Some((1, WorkerId(0))));
        assert_eq!(lru.pop_oldest(), Some((4, WorkerId(2))));
        assert_eq!(lru.pop_oldest(), None);
    }
}
