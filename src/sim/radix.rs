//! Radix prefix cache over token ids, modelled on SGLang's `RadixCache`
//! (`srt/mem_cache/radix_cache.py`).
//!
//! * A compressed radix tree: every edge holds a run of tokens (a multiple of
//!   the page size), so memory is proportional to the stored tokens and a long
//!   run costs one node, not one node per token. Edges are split when a match or
//!   an insert diverges in the middle of a run.
//! * Page size `P` (default 1, as `--page-size`): inserts are truncated and
//!   matches rounded down to a multiple of `P`, and edges are only ever split at
//!   page boundaries, so children are keyed by their first page.
//! * Nodes carry a lock count (`inc_lock_ref` / `dec_lock_ref` in SGLang): a
//!   locked node and its ancestors are never evicted. Eviction removes
//!   unlocked leaves in least-recently-used order, whole nodes at a time, and
//!   may therefore free a little more than asked.
//! * Recency is a logical clock bumped by every `match_prefix` / `insert`, so
//!   the cache is deterministic.
//! * With [`RadixCache::record_events`] it records SGLang's KV events as the tree
//!   changes: a new node's pages stored, an evicted node's pages removed, a clear
//!   (`enable_kv_cache_events`, drained by the scheduler after each step).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::kv_events::blocks::{record_removed, record_stored, BlockEvent};

const ROOT: usize = 0;

/// A node of the tree as returned by [`RadixCache::match_prefix`]; pass it to
/// [`RadixCache::lock`] / [`RadixCache::unlock`]. A handle stays valid while it
/// is locked; an unlocked handle may dangle after [`RadixCache::evict`] or
/// [`RadixCache::clear`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeHandle(usize);

impl NodeHandle {
    /// The root (empty prefix). Locking it is a no-op.
    pub const ROOT: NodeHandle = NodeHandle(ROOT);
}

#[derive(Debug, Default)]
struct Node {
    parent: usize,
    key: Vec<u32>,
    children: HashMap<Box<[u32]>, usize>,
    lock_ref: u32,
    last_access: u64,
}

/// LRU radix prefix cache. See the module docs.
#[derive(Debug)]
pub struct RadixCache {
    nodes: Vec<Node>,
    free: Vec<usize>,
    page: usize,
    clock: u64,
    total: usize,
    protected: usize,
    /// KV events since the last [`take_events`](RadixCache::take_events), when recording.
    events: Option<Vec<BlockEvent>>,
}

impl Default for RadixCache {
    fn default() -> Self {
        Self::new(1)
    }
}

impl RadixCache {
    /// An empty cache; a `page_size` of 0 is treated as 1.
    pub fn new(page_size: usize) -> Self {
        RadixCache {
            nodes: vec![Node::default()],
            free: Vec::new(),
            page: page_size.max(1),
            clock: 0,
            total: 0,
            protected: 0,
            events: None,
        }
    }

    /// Records KV events from now on (SGLang's `enable_kv_cache_events`).
    pub fn record_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// The events recorded since the last call (empty when not recording).
    pub fn take_events(&mut self) -> Vec<BlockEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Tokens stored in the tree (locked and unlocked).
    pub fn cached_tokens(&self) -> usize {
        self.total
    }

    /// Tokens that `evict` could free now (not on a locked path).
    pub fn evictable_tokens(&self) -> usize {
        self.total - self.protected
    }

    /// Tokens on locked paths.
    pub fn protected_tokens(&self) -> usize {
        self.protected
    }

    /// Number of non-root nodes (for tests and memory estimates).
    pub fn node_count(&self) -> usize {
        self.nodes.len() - 1 - self.free.len()
    }

    /// Longest page-aligned cached prefix of `tokens`. Marks the matched path as
    /// recently used and splits an edge so that the returned handle covers
    /// exactly the matched prefix.
    pub fn match_prefix(&mut self, tokens: &[u32]) -> (usize, NodeHandle) {
        self.clock += 1;
        let now = self.clock;
        let page = self.page;
        let mut node = ROOT;
        let mut pos = 0;
        self.nodes[ROOT].last_access = now;
        while tokens.len() - pos >= page {
            let Some(&child) = self.nodes[node].children.get(&tokens[pos..pos + page]) else {
                break;
            };
            let n = self.common_len(child, &tokens[pos..]);
            let target = if n < self.nodes[child].key.len() {
                self.split(child, n)
            } else {
                child
            };
            self.nodes[target].last_access = now;
            node = target;
            pos += n;
            if target != child {
                break;
            }
        }
        (pos, NodeHandle(node))
    }

    /// Like [`match_prefix`](Self::match_prefix) without touching recency or
    /// the tree's shape: for estimates such as `num_waiting_uncached_tokens`.
    pub fn peek_prefix(&self, tokens: &[u32]) -> usize {
        let page = self.page;
        let mut node = ROOT;
        let mut pos = 0;
        while tokens.len() - pos >= page {
            let Some(&child) = self.nodes[node].children.get(&tokens[pos..pos + page]) else {
                break;
            };
            let n = self.common_len(child, &tokens[pos..]);
            pos += n;
            if n < self.nodes[child].key.len() {
                break;
            }
            node = child;
        }
        pos
    }

    /// Inserts the page-aligned part of `tokens`; returns how many tokens were
    /// new to the tree. The whole path becomes most recently used.
    pub fn insert(&mut self, tokens: &[u32]) -> usize {
        self.clock += 1;
        let now = self.clock;
        let page = self.page;
        let tokens = &tokens[..tokens.len() / page * page];
        let mut node = ROOT;
        let mut pos = 0;
        self.nodes[ROOT].last_access = now;
        while pos < tokens.len() {
            let rest = &tokens[pos..];
            match self.nodes[node].children.get(&rest[..page]) {
                None => {
                    let leaf = self.alloc(Node {
                        parent: node,
                        key: rest.to_vec(),
                        children: HashMap::new(),
                        lock_ref: 0,
                        last_access: now,
                    });
                    self.nodes[node].children.insert(rest[..page].into(), leaf);
                    self.total += rest.len();
                    if let Some(events) = &mut self.events {
                        record_stored(events, tokens, pos, page);
                    }
                    return rest.len();
                }
                Some(&child) => {
                    let n = self.common_len(child, rest);
                    node = if n < self.nodes[child].key.len() {
                        self.split(child, n)
                    } else {
                        child
                    };
                    self.nodes[node].last_access = now;
                    pos += n;
                }
            }
        }
        0
    }

    /// Pins the path from `handle` to the root against eviction.
    pub fn lock(&mut self, handle: NodeHandle) {
        let mut node = handle.0;
        while node != ROOT {
            let n = &mut self.nodes[node];
            if n.lock_ref == 0 {
                self.protected += n.key.len();
            }
            n.lock_ref += 1;
            node = n.parent;
        }
    }

    /// Undoes one [`lock`](Self::lock) of `handle`.
    pub fn unlock(&mut self, handle: NodeHandle) {
        let mut node = handle.0;
        while node != ROOT {
            let n = &mut self.nodes[node];
            debug_assert!(n.lock_ref > 0, "unlock of an unlocked node");
            if n.lock_ref == 1 {
                self.protected -= n.key.len();
            }
            n.lock_ref = n.lock_ref.saturating_sub(1);
            node = n.parent;
        }
    }

    /// Evicts unlocked leaves, least recently used first, until at least
    /// `n_tokens` are freed or nothing evictable is left; returns the number of
    /// tokens freed.
    pub fn evict(&mut self, n_tokens: usize) -> usize {
        if n_tokens == 0 {
            return 0;
        }
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (1..self.nodes.len())
            .filter(|&i| self.is_evictable_leaf(i))
            .map(|i| Reverse((self.nodes[i].last_access, i)))
            .collect();
        let mut freed = 0;
        while freed < n_tokens {
            let Some(Reverse((_, i))) = heap.pop() else {
                break;
            };
            let parent = self.nodes[i].parent;
            freed += self.remove_leaf(i);
            if parent != ROOT && self.is_evictable_leaf(parent) {
                heap.push(Reverse((self.nodes[parent].last_access, parent)));
            }
        }
        freed
    }

    /// Drops everything (SGLang's `flush_cache`). Invalidates all handles.
    pub fn clear(&mut self) {
        let events = self.events.take();
        *self = RadixCache::new(self.page);
        if let Some(mut events) = events {
            events.push(BlockEvent::Cleared);
            self.events = Some(events);
        }
    }

    /// The tokens from the root to the end of node `i`'s key.
    fn path_tokens(&self, mut i: usize) -> Vec<u32> {
        let mut keys = Vec::new();
        while i != ROOT {
            keys.push(&self.nodes[i].key);
            i = self.nodes[i].parent;
        }
        keys.into_iter().rev().flatten().copied().collect()
    }

    fn is_evictable_leaf(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        i != ROOT && !n.key.is_empty() && n.children.is_empty() && n.lock_ref == 0
    }

    fn remove_leaf(&mut self, i: usize) -> usize {
        if self.events.is_some() {
            let path = self.path_tokens(i);
            let from = path.len() - self.nodes[i].key.len();
            if let Some(events) = &mut self.events {
                record_removed(events, &path, from, self.page);
            }
        }
        let key = std::mem::take(&mut self.nodes[i].key);
        let parent = self.nodes[i].parent;
        self.nodes[parent].children.remove(&key[..self.page]);
        self.nodes[i] = Node::default();
        self.free.push(i);
        self.total -= key.len();
        key.len()
    }

    fn alloc(&mut self, node: Node) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    /// Page-aligned length of the common prefix of `child`'s key and `tokens`.
    fn common_len(&self, child: usize, tokens: &[u32]) -> usize {
        let key = &self.nodes[child].key;
        let n = key.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        n / self.page * self.page
    }

    /// Splits `child`'s edge after `at` tokens (page-aligned, `0 < at < len`);
    /// returns the new upper node, which inherits lock count and recency.
    fn split(&mut self, child: usize, at: usize) -> usize {
        let page = self.page;
        let parent = self.nodes[child].parent;
        let lower: Vec<u32> = self.nodes[child].key.split_off(at);
        let mut upper = std::mem::replace(&mut self.nodes[child].key, lower);
        upper.shrink_to_fit();
        let mut children = HashMap::with_capacity(1);
        children.insert(self.nodes[child].key[..page].into(), child);
        let mid = self.alloc(Node {
            parent,
            key: upper,
            children,
            lock_ref: self.nodes[child].lock_ref,
            last_access: self.nodes[child].last_access,
        });
        self.nodes[child].parent = mid;
        let first: Box<[u32]> = self.nodes[mid].key[..page].into();
        self.nodes[parent].children.insert(first, mid);
        mid
    }
}

#[cfg(test)]
mod tests;
