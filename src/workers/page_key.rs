//! Page keys: a prompt cut into pages, each page's key hashing its tokens with the previous
//! page's key, so one key stands for the whole prefix up to its page. The prefix index and the
//! KV-event index share them (so one prompt is hashed once when their page sizes agree).

use std::hash::Hasher;

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// Keys are already well-mixed 64-bit hashes: pass them through instead of SipHashing again.
#[derive(Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(MUL);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The final avalanche of MurmurHash3: spreads every input bit over the whole word.
pub fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Seeds of the four lanes a page's tokens are spread over (distinct, so that tokens trading
/// lanes change the key).
const LANES: [u64; 4] = [
    0x2d35_8dcc_aa6c_78a5,
    0x8bb8_4b93_962e_acc9,
    0x4b33_a62e_d433_d4a3,
    0x4d5a_2da5_1de1_aa47,
];

/// Hash of one page chained onto the previous page's hash (`None` for the first page).
///
/// This runs over every prompt token on every request. Two tokens go into each multiply, and
/// four lanes take turns at them: a lane's chain does not wait on the others or on `prev`, so
/// the multiplies of a page overlap (and those of the next page start before this one's key
/// is known). Only the fold of the lanes into `prev` is a chain from page to page.
pub fn hash_page(prev: Option<u64>, page: &[u32]) -> u64 {
    let mut lanes = LANES;
    let mut rounds = page.chunks_exact(8);
    for round in &mut rounds {
        for (lane, pair) in lanes.iter_mut().zip(round.chunks_exact(2)) {
            let v = pair.iter().fold(0u64, |acc, t| (acc << 32) | u64::from(*t));
            *lane = (*lane ^ v).wrapping_mul(MUL).rotate_left(31);
        }
    }
    let mut h = prev.unwrap_or(SEED) ^ (page.len() as u64);
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(MUL).rotate_left(31);
    }
    for t in rounds.remainder() {
        h = (h ^ u64::from(*t)).wrapping_mul(MUL).rotate_left(31);
    }
    mix64(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_its_place_and_the_prefix_change_the_key() {
        let page: Vec<u32> = (0..16).map(|t| t * 7 + 1).collect();
        let key = hash_page(None, &page);
        let mut keys = std::collections::HashSet::new();
        keys.insert(key);
        // Each token changed, and each pair of tokens swapped (within a lane and across lanes).
        for i in 0..16 {
            let mut p = page.clone();
            p[i] += 1;
            assert!(keys.insert(hash_page(None, &p)), "token {i}");
            for j in i + 1..16 {
                let mut p = page.clone();
                p.swap(i, j);
                assert!(keys.insert(hash_page(None, &p)), "swap {i} {j}");
            }
        }
        assert_ne!(hash_page(Some(key), &page), key, "chained on a prefix");
        assert_ne!(hash_page(Some(1), &page), hash_page(Some(2), &page));
        // A partial round (page sizes that are not multiples of 8) and its length count too.
        assert_ne!(hash_page(None, &page[..12]), hash_page(None, &page[..13]));
        assert_ne!(hash_page(None, &[0; 3]), hash_page(None, &[0; 4]));
        assert_eq!(hash_page(Some(9), &page), hash_page(Some(9), &page));
    }
}
