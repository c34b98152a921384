use super::cache::{entry_bytes, CACHE_BUDGET_BYTES};
use super::*;
use proptest::prelude::*;
use std::cell::RefCell;
use std::ops::Range;

fn bytewise(t: &str) -> Result<Encoded, TokenizeError> {
    Ok(t.bytes()
        .enumerate()
        .map(|(i, b)| (u32::from(b), i))
        .collect())
}

fn plain(t: &str) -> Vec<u32> {
    t.bytes().map(u32::from).collect()
}

#[test]
fn specials_by_id_and_pieces_from_the_cache() {
    let seg = Segmenter::new(vec![("<s>".into(), 1000), ("<|x|>".into(), 1001)]).unwrap();
    let calls = RefCell::new(Vec::new());
    let enc = |t: &str| {
        calls.borrow_mut().push(t.to_owned());
        bytewise(t)
    };
    let ids = seg.encode("<s>hello big world<|x|>b<s>", &enc).unwrap();
    let mut want = vec![1000];
    want.extend(plain("hello big world"));
    want.push(1001);
    want.extend(plain("b"));
    want.push(1000);
    assert_eq!(ids, want);
    assert_eq!(
        *calls.borrow(),
        ["hello big world", "b"],
        "one call per run"
    );
    calls.borrow_mut().clear();
    let ids = seg.encode("world big hello world<s>", &enc).unwrap();
    assert_eq!(ids[..21], plain("world big hello world")[..]);
    assert_eq!(
        *calls.borrow(),
        ["world hello"],
        "\" big\" from the cache, the missing pieces in one call, \" world\" once"
    );
}

#[test]
fn the_longest_special_token_at_the_leftmost_place_wins() {
    // As HF's added-vocabulary split: "<|a|>b" over its prefix "<|a|>", and a token starting
    // inside an earlier match is not looked for.
    let specials = vec![("<|a|>".into(), 1), ("<|a|>b".into(), 2), ("|>b".into(), 3)];
    let seg = Segmenter::new(specials).unwrap();
    let ids = seg.encode("x<|a|>by<|a|>", &bytewise).unwrap();
    assert_eq!(ids, [u32::from(b'x'), 2, u32::from(b'y'), 1]);
}

#[test]
fn missing_pieces_land_between_the_cached_ones_in_text_order() {
    let seg = Segmenter::new(vec![]).unwrap();
    seg.encode("a b c", &bytewise).unwrap();
    let calls = RefCell::new(Vec::new());
    let enc = |t: &str| {
        calls.borrow_mut().push(t.to_owned());
        bytewise(t)
    };
    // Cached, missing, cached, a missing one again, missing, cached, missing at the end.
    let text = "a x1 b x1 y22 c z333";
    assert_eq!(seg.encode(text, &enc).unwrap(), plain(text));
    assert_eq!(*calls.borrow(), [" x1 y22 z333"], "one run, \" x1\" once");
    calls.borrow_mut().clear();
    assert_eq!(seg.encode(text, &enc).unwrap(), plain(text));
    assert!(
        calls.borrow().is_empty(),
        "all cached now: {:?}",
        calls.borrow()
    );
}

#[test]
fn long_segments_are_cached_whole_once_they_repeat() {
    let seg = Segmenter::new(vec![("<s>".into(), 1000)]).unwrap();
    let calls = RefCell::new(0);
    let enc = |t: &str| {
        *calls.borrow_mut() += 1;
        bytewise(t)
    };
    let long: String = (0..100).map(|i| format!(" w{i}")).collect();
    let text = format!("<s>{long}<s>");
    let mut sizes = Vec::new();
    for _ in 0..3 {
        assert_eq!(
            seg.encode(&text, &enc).unwrap()[1..=long.len()],
            plain(&long)[..]
        );
        sizes.push(seg.cached_bytes());
    }
    assert_eq!(*calls.borrow(), 1, "pieces cached after the first time");
    assert!(
        sizes[1] >= sizes[0] + entry_bytes(long.len(), plain(&long).len()),
        "cached whole the second time: {sizes:?}"
    );
    assert_eq!(sizes[2], sizes[1], "and hit the third: {sizes:?}");
}

#[test]
fn long_unique_text_is_encoded_in_runs_and_later_repeats_hit() {
    let seg = Segmenter::new(vec![]).unwrap();
    let calls = RefCell::new(0);
    let enc = |t: &str| {
        *calls.borrow_mut() += 1;
        bytewise(t)
    };
    let words: String = (0..400).map(|i| format!(" w{i}")).collect();
    let text = format!("{words}{words}");
    assert_eq!(seg.encode(&text, &enc).unwrap(), plain(&text));
    let runs = *calls.borrow();
    assert!(
        runs > 1 && runs <= words.len() / RUN_BYTES + 2,
        "{runs} calls for {} bytes",
        words.len()
    );
}

#[test]
fn offsets_that_miss_the_cuts_fall_back_to_one_call_per_piece() {
    let seg = Segmenter::new(vec![]).unwrap();
    let calls = RefCell::new(Vec::new());
    // Every token claims to start at 0: the second piece gets none.
    let enc = |t: &str| {
        calls.borrow_mut().push(t.to_owned());
        Ok(t.bytes().map(|b| (u32::from(b), 0)).collect())
    };
    assert_eq!(seg.encode("ab cd", &enc).unwrap(), plain("ab cd"));
    assert_eq!(*calls.borrow(), ["ab cd", "ab", " cd"]);
}

#[test]
fn cuts_only_at_single_spaces_between_words() {
    let cut = |t: &str| {
        pieces(t, false)
            .map(|r| &t[r])
            .collect::<Vec<_>>()
            .join("|")
    };
    assert_eq!(cut("ab  cd ef"), "ab  cd| ef");
    assert_eq!(cut("ab\u{3000} cd x \u{3000}"), "ab\u{3000} cd| x \u{3000}");
    assert_eq!(cut(" a\nb c "), " a\nb| c ");
    // Control characters: a vertical tab and U+0085 are whitespace, U+0001 and DEL are not.
    assert_eq!(cut("a\u{b} b c"), "a\u{b} b| c");
    assert_eq!(cut("a\u{1} b\u{7f} c"), "a\u{1}| b\u{7f}| c");
    assert_eq!(cut("é ü a \u{85}b"), "é| ü| a \u{85}b");
    assert_eq!(cut("x"), "x");
    assert_eq!(cut(""), "");
    assert_eq!(cut("on 2024-11"), "on| 2024-11");
}

#[test]
fn digit_cuts_fall_between_two_digits() {
    let cut = |t: &str| pieces(t, true).map(|r| &t[r]).collect::<Vec<_>>().join("|");
    assert_eq!(cut("on 2024-11 x9y 7"), "on| 2|0|2|4-1|1| x9y| 7");
    assert_eq!(cut("12"), "12", "nothing is cut off the last byte");
}

#[test]
fn the_word_at_a_time_search_finds_the_first_space_or_digit() {
    let bytewise = |b: &[u8]| b.iter().position(|&b| b == b' ' || b.is_ascii_digit());
    // Every byte value at every place in, across and after whole words, among bytes that mark
    // nothing or that borrow (0x00, and 0x1f and 0x2f just below the two ranges), with a digit
    // after it: the first match must win over a later one.
    for len in 0..=19 {
        for at in 0..len {
            for b in 0..=255u8 {
                for fill in [b'a', 0x00, 0x1f, 0x2f, 0xff] {
                    let mut bytes = vec![fill; len];
                    bytes[at] = b;
                    if let Some(next) = bytes.get_mut(at + 1) {
                        *next = b'5';
                    }
                    assert_eq!(cuts::space_or_digit(&bytes), bytewise(&bytes), "{bytes:?}");
                }
            }
        }
    }
}

/// The cut rule byte by byte: a single space between two non-whitespace characters, or (with
/// digit cuts) a digit after a digit, never at the first or the last byte.
fn bytewise_pieces(t: &str, digits: bool) -> Vec<Range<usize>> {
    let b = t.as_bytes();
    let not_space = |c: Option<char>| c.is_some_and(|c| !c.is_whitespace());
    let mut cuts = vec![0];
    for at in 1..b.len().saturating_sub(1) {
        let space = b[at] == b' '
            && not_space(t[..at].chars().next_back())
            && not_space(t[at + 1..].chars().next());
        let digit = digits && b[at].is_ascii_digit() && b[at - 1].is_ascii_digit();
        if space || digit {
            cuts.push(at);
        }
    }
    cuts.push(b.len());
    let pieces = cuts.windows(2).map(|w| w[0]..w[1]);
    pieces.filter(|r| !r.is_empty()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    /// Texts of up to 40 characters, across the cutter's eight-byte words, from the characters
    /// each of its checks tells apart: the space and whitespace beside it (tab, newline, U+0085,
    /// U+3000), digits and the bytes just outside their range ('/', ':'), control characters
    /// that are not whitespace, DEL, printable ASCII at both ends and multi-byte letters.
    #[test]
    fn the_cuts_are_the_bytewise_ones(
        chars in proptest::collection::vec(
            proptest::sample::select(" \t\n\u{85}\u{3000}0159/:\u{1}\u{7f}!~aZé€😀".chars().collect::<Vec<_>>()),
            0..40,
        ),
        digits in any::<bool>(),
    ) {
        let text: String = chars.into_iter().collect();
        let got: Vec<_> = pieces(&text, digits).collect();
        prop_assert_eq!(got, bytewise_pieces(&text, digits));
    }
}

#[test]
fn a_piece_cut_off_between_digits_joins_only_its_neighbour() {
    let seg = Segmenter::new(vec![]).unwrap().with_digit_cuts();
    let calls = RefCell::new(Vec::new());
    let enc = |t: &str| {
        calls.borrow_mut().push(t.to_owned());
        bytewise(t)
    };
    seg.encode("a 1", &enc).unwrap();
    calls.borrow_mut().clear();
    // " 1" is cached: "b" and "2x" are missing but not neighbours, so "b2x" is never encoded.
    let text = "b 1 x 12x";
    assert_eq!(seg.encode(text, &enc).unwrap(), plain(text));
    assert_eq!(*calls.borrow(), ["b x", "2x"]);
}

/// Encodes pieces without digits alone (as 1000 + byte), the rest through `with_offsets`.
struct QuickWords {
    runs: RefCell<Vec<String>>,
}

impl Encode for QuickWords {
    fn with_offsets(&self, text: &str) -> Result<Encoded, TokenizeError> {
        self.runs.borrow_mut().push(text.to_owned());
        bytewise(text)
    }

    fn pieces(&self, pieces: &[&str]) -> Vec<Option<Vec<u32>>> {
        let one = |piece: &str| {
            let quick = !piece.bytes().any(|b| b.is_ascii_digit());
            quick.then(|| piece.bytes().map(|b| 1000 + u32::from(b)).collect())
        };
        pieces.iter().map(|p| one(p)).collect()
    }
}

#[test]
fn pieces_with_a_quick_way_are_encoded_alone_and_land_in_place() {
    let seg = Segmenter::new(vec![]).unwrap();
    let quick = QuickWords {
        runs: RefCell::new(Vec::new()),
    };
    seg.encode("b", &quick).unwrap();
    let text = "a1 b c2 d3 e b";
    let want: Vec<u32> = [
        ("a1", 0),
        (" b", 1000),
        (" c2", 0),
        (" d3", 0),
        (" e", 1000),
        (" b", 1000),
    ]
    .iter()
    .flat_map(|&(piece, add)| piece.bytes().map(move |b| add + u32::from(b)))
    .collect();
    assert_eq!(seg.encode(text, &quick).unwrap(), want);
    // The slow pieces still share one call; the quick ones never reach it.
    assert_eq!(*quick.runs.borrow(), ["a1 c2 d3"]);
    // And the quick ones are cached like any other.
    quick.runs.borrow_mut().clear();
    assert_eq!(seg.encode(text, &quick).unwrap(), want);
    assert!(quick.runs.borrow().is_empty());
}

fn held_bytes(cache: &TwoGenerations) -> usize {
    let all = cache.current.sizes().chain(cache.previous.sizes());
    all.map(|(piece, ids)| entry_bytes(piece, ids)).sum()
}

#[test]
fn cache_stays_within_its_budget_and_counts_what_it_holds() {
    let mut cache = TwoGenerations::default();
    let ids = vec![0u32; 250];
    let per = entry_bytes(b"piece 000000".len(), ids.len());
    for i in 0..(3 * CACHE_BUDGET_BYTES / per) {
        // Short pieces and long ones (kept apart, by value and by their bytes).
        let piece = ["piece", "a piece longer than a short key"][i % 2];
        cache.insert(format!("{piece} {i:06}").as_bytes(), &ids);
        // Counted in full (a pass over every entry) now and then, and where the generations
        // have just turned or are about to: the fullest and the emptiest moments.
        let full = cache.current_bytes + 2 * per > CACHE_BUDGET_BYTES / 2;
        if i % 64 != 0 && cache.current_bytes > 2 * per && !full {
            continue;
        }
        let held = held_bytes(&cache);
        assert_eq!(cache.current_bytes + cache.previous_bytes, held);
        assert!(held <= CACHE_BUDGET_BYTES, "{held}");
    }
    // A hit in the previous generation moves the entry forward without double counting;
    // inserting a piece again (two threads missed it) keeps it once.
    let old = cache.previous.a_piece().unwrap();
    assert!(cache.copy_into(&old, &mut Vec::new()));
    let before = cache.current.held();
    cache.insert(&old, &ids);
    assert_eq!(cache.current.held(), before);
    let held = held_bytes(&cache);
    assert_eq!(cache.current_bytes + cache.previous_bytes, held);
}

#[test]
fn a_generation_grows_in_shards_of_its_pieces() {
    // A map grows all at once, on the inserting thread: the most any one insert can make the
    // cache move is the largest shard, not the whole generation.
    let mut cache = TwoGenerations::default();
    let pieces = 20_000;
    for i in 0..pieces {
        // Pieces as a client could choose them: all alike but for a counter, short (kept by
        // value) and long (by their bytes).
        cache.insert(format!(" w{i:07}").as_bytes(), &[1, 2]);
        cache.insert(format!(" a longer piece, number {i:07}").as_bytes(), &[3]);
    }
    let current = &cache.current;
    let held = current.held();
    assert_eq!(held[..2], [pieces, pieces], "all in the current generation");
    let largest = current.largest_shard();
    assert!(
        largest * 16 <= pieces,
        "largest shard {largest} of {pieces}"
    );
    let even = pieces / current.shards();
    assert!(
        largest <= 2 * even,
        "largest shard {largest}, {even} each if even"
    );
}

#[test]
fn ids_come_back_as_inserted_from_either_generation() {
    let mut cache = TwoGenerations::default();
    // Long pieces, and short ones of more ids than the front table keeps, are read from the
    // generations' maps; a short piece of one id from the front table.
    let pieces = [" a piece of one id", " a piece of several", " abcd", " b"];
    let ids: [&[u32]; 4] = [&[u32::MAX], &[1, 2, 3], &[4, 4, 4, 4], &[7]];
    for (piece, ids) in pieces.iter().zip(ids) {
        cache.insert(piece.as_bytes(), ids);
    }
    let read = |cache: &mut TwoGenerations| -> Vec<Vec<u32>> {
        let mut all = Vec::new();
        for piece in pieces {
            let mut out = vec![5];
            assert!(cache.copy_into(piece.as_bytes(), &mut out), "{piece:?}");
            all.push(out.split_off(1));
        }
        all
    };
    let want: Vec<Vec<u32>> = ids.iter().map(|ids| ids.to_vec()).collect();
    assert_eq!(read(&mut cache), want);
    // Turned into the previous generation (by other pieces filling the current one), then
    // read back from it and moved forward; a second read finds them in the current one.
    let filler = vec![0u32; 1000];
    let mut i = 0;
    while cache.previous.held() == [0, 0, 0] {
        cache.insert(format!(" filler{i}").as_bytes(), &filler);
        i += 1;
    }
    assert_eq!(read(&mut cache), want);
    assert_eq!(read(&mut cache), want);
    assert!(!cache.copy_into(b" not there", &mut Vec::new()));
}
