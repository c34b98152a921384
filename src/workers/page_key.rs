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

/// Hash of one page chained onto the previous page's hash (`None` for the first page).
pub fn hash_page(prev: Option<u64>, page: &[u32]) -> u64 {
    let mut h = prev.unwrap_or(SEED) ^ (page.len() as u64);
    // Two tokens per multiply: this runs over every prompt token on every request.
    let mut pairs = page.chunks_exact(2);
    for pair in &mut pairs {
        let v = pair.iter().fold(0u64, |acc, t| (acc << 32) | u64::from(*t));
        h = (h ^ v).wrapping_mul(MUL).rotate_left(31);
    }
    for t in pairs.remainder() {
        h = (h ^ u64::from(*t)).wrapping_mul(MUL).rotate_left(31);
    }
    mix64(h)
}
