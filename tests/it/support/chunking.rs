//! Text cut into pieces for streaming parsers: the same chunkings in every run.

/// A small deterministic generator: the chunkings are the same in every run.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Chunkings of `text`: every cut in two, one character at a time, and random pieces.
pub fn chunkings<'a>(text: &'a str, rng: &mut XorShift) -> Vec<Vec<&'a str>> {
    let bounds: Vec<usize> = (1..text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    let mut out = vec![vec![text]];
    for &b in &bounds {
        out.push(vec![&text[..b], &text[b..]]);
    }
    let mut cuts: Vec<usize> = bounds.clone();
    out.push(pieces(text, &mut cuts));
    for _ in 0..30 {
        let mut cuts: Vec<usize> = bounds
            .iter()
            .copied()
            .filter(|_| rng.below(3) == 0)
            .collect();
        out.push(pieces(text, &mut cuts));
    }
    out
}

fn pieces<'a>(text: &'a str, cuts: &mut Vec<usize>) -> Vec<&'a str> {
    cuts.push(text.len());
    let mut from = 0;
    cuts.iter()
        .map(|&to| {
            let p = &text[from..to];
            from = to;
            p
        })
        .collect()
}
