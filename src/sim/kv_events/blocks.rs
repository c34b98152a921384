//! SGLang's block hashes and the per-page events the radix cache records.
//!
//! A page's hash is SHA-256 over the previous page's full digest (none for a prompt's first
//! page) followed by the page's token ids as u32 little-endian (`hicache_storage.get_hash_str`);
//! the event carries its first 8 bytes as a signed big-endian i64 (`hash_str_to_int64`).

use sha2::{Digest, Sha256};

/// A page's full digest: what the next page chains on.
pub type PageDigest = [u8; 32];

/// One page's change, as `RadixCache._record_store_event` / `_record_remove_event` /
/// `_record_all_cleared_event` emit them (one event per page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockEvent {
    Stored {
        hash: i64,
        parent: Option<i64>,
        token_ids: Vec<u32>,
    },
    Removed {
        hash: i64,
    },
    Cleared,
}

/// `get_hash_str(page, prior)`.
pub fn page_digest(prior: Option<&PageDigest>, page: &[u32]) -> PageDigest {
    let mut h = Sha256::new();
    if let Some(p) = prior {
        h.update(p);
    }
    for t in page {
        h.update(t.to_le_bytes());
    }
    h.finalize().into()
}

/// `hash_str_to_int64`: the digest's first 16 hex characters as a signed 64-bit integer.
pub fn block_hash(digest: &PageDigest) -> i64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// Digests of every whole page of `tokens`, chained from the first.
fn chain(tokens: &[u32], page: usize) -> Vec<PageDigest> {
    let mut out: Vec<PageDigest> = Vec::with_capacity(tokens.len() / page);
    for p in tokens.chunks_exact(page) {
        let d = page_digest(out.last(), p);
        out.push(d);
    }
    out
}

/// A new radix node holding `path[from..]` (its parent holds `path[..from]`): one `Stored`
/// per page, each naming the page before it (none under the root).
pub fn record_stored(out: &mut Vec<BlockEvent>, path: &[u32], from: usize, page: usize) {
    let digests = chain(path, page);
    let first = from / page;
    let mut parent = first
        .checked_sub(1)
        .and_then(|i| digests.get(i))
        .map(block_hash);
    for (d, tokens) in digests
        .iter()
        .skip(first)
        .zip(path[from..].chunks_exact(page))
    {
        let hash = block_hash(d);
        out.push(BlockEvent::Stored {
            hash,
            parent,
            token_ids: tokens.to_vec(),
        });
        parent = Some(hash);
    }
}

/// A radix node holding `path[from..]` was evicted: one `Removed` per page.
pub fn record_removed(out: &mut Vec<BlockEvent>, path: &[u32], from: usize, page: usize) {
    let digests = chain(path, page);
    for d in digests.iter().skip(from / page) {
        out.push(BlockEvent::Removed {
            hash: block_hash(d),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_chain_like_get_hash_str() {
        // sha256(b"\x01\0\0\0\x02\0\0\0"), then chained: values from hashlib.
        let d1 = page_digest(None, &[1, 2]);
        let mut h = Sha256::new();
        h.update([1u8, 0, 0, 0, 2, 0, 0, 0]);
        let expect: PageDigest = h.finalize().into();
        assert_eq!(d1, expect);
        let d2 = page_digest(Some(&d1), &[3, 4]);
        let mut h = Sha256::new();
        h.update(d1);
        h.update([3u8, 0, 0, 0, 4, 0, 0, 0]);
        let expect: PageDigest = h.finalize().into();
        assert_eq!(d2, expect);
        let mut bytes = [0u8; 32];
        bytes[0] = 0xff;
        assert_eq!(
            block_hash(&bytes),
            i64::from_be_bytes([0xff, 0, 0, 0, 0, 0, 0, 0])
        );
    }

    #[test]
    fn stored_pages_link_to_their_parents() {
        let path: Vec<u32> = (0..8).collect();
        let mut ev = Vec::new();
        record_stored(&mut ev, &path, 4, 2);
        let hashes: Vec<i64> = chain(&path, 2).iter().map(block_hash).collect();
        assert_eq!(
            ev,
            vec![
                BlockEvent::Stored {
                    hash: hashes[2],
                    parent: Some(hashes[1]),
                    token_ids: vec![4, 5]
                },
                BlockEvent::Stored {
                    hash: hashes[3],
                    parent: Some(hashes[2]),
                    token_ids: vec![6, 7]
                },
            ]
        );
        ev.clear();
        record_stored(&mut ev, &path[..2], 0, 2);
        assert!(matches!(ev[0], BlockEvent::Stored { parent: None, .. }));
        ev.clear();
        record_removed(&mut ev, &path, 6, 2);
        assert_eq!(ev, vec![BlockEvent::Removed { hash: hashes[3] }]);
    }
}
