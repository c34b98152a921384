use crate::tokenize::tests::{load, ALL, MISTRAL, QWEN25};
use proptest::prelude::*;

const TEXT: &str = "Hello, world! 你好，世界 🦙 Ça va? Привет, мир! こんにちは 👩‍💻 مرحبا \
                    naïve café — “quotes” tabs\tand\nnewlines 12345 x² ∑ 🇫🇷!";

/// Push `ids` in the given group sizes, then finish; return every delta
/// and the final match.
fn run(
    name: &str,
    ids: &[u32],
    groups: &[usize],
    stops: &[&str],
) -> (Vec<String>, Option<String>, bool) {
    let tok = load(name);
    let mut dec = tok.incremental_decoder(true, stops.iter().map(|s| s.to_string()).collect());
    let mut deltas = Vec::new();
    let mut rest = ids;
    let mut sizes = groups.iter().copied().cycle();
    while !rest.is_empty() {
        let n = sizes.next().unwrap_or(1).clamp(1, rest.len());
        let (step, tail) = rest.split_at(n);
        rest = tail;
        let d = dec.push(step).unwrap();
        assert!(
            !d.text.contains('\u{FFFD}'),
            "{name}: partial char leaked: {:?}",
            d.text
        );
        deltas.push(d.text.to_owned());
        if d.finished {
            return (deltas, d.matched_stop.map(str::to_owned), true);
        }
    }
    let d = dec.finish().unwrap();
    assert!(d.finished);
    deltas.push(d.text.to_owned());
    (deltas, d.matched_stop.map(str::to_owned), false)
}

#[test]
fn one_id_at_a_time_equals_full_decode() {
    for name in ALL {
        let tok = load(name);
        let ids = tok.encode(TEXT, false).unwrap();
        let (deltas, stop, _) = run(name, &ids, &[1], &[]);
        assert_eq!(stop, None);
        assert_eq!(deltas.concat(), tok.decode(&ids, true).unwrap(), "{name}");
        // Multi-token characters were held back at least once.
        assert!(deltas.iter().any(String::is_empty), "{name}");
    }
}

#[test]
fn special_tokens_are_skipped() {
    let tok = load(QWEN25);
    let mut ids = tok.encode("Hi there", false).unwrap();
    ids.push(151_645); // <|im_end|>
    let (deltas, _, _) = run(QWEN25, &ids, &[1], &[]);
    assert_eq!(deltas.concat(), "Hi there");
    let mut dec = tok.incremental_decoder(false, vec![]);
    let mut out = dec.push(&ids).unwrap().text.to_owned();
    out += dec.finish().unwrap().text;
    assert_eq!(out, "Hi there<|im_end|>");
}

#[test]
fn stop_string_over_several_tokens_is_cut_exactly() {
    for name in ALL {
        let tok = load(name);
        let text = "The answer is forty-two. END OF ANSWER and then more text";
        let ids = tok.encode(text, false).unwrap();
        let stop = "END OF ANSWER";
        let decoded = tok.decode(&ids, true).unwrap();
        let at = decoded.find(stop).unwrap();
        let (deltas, matched, finished) = run(name, &ids, &[1], &["nope", stop]);
        assert!(finished, "{name}: finished before finish()");
        assert_eq!(matched.as_deref(), Some(stop));
        assert_eq!(deltas.concat(), &decoded[..at], "{name}");
        // Nothing past the text before the stop was ever sent.
        let mut sent = String::new();
        for d in &deltas {
            sent.push_str(d);
            assert!(
                sent.len() <= at && decoded.starts_with(&sent),
                "{name}: leaked {sent:?}"
            );
        }
    }
}

#[test]
fn ids_after_a_stop_are_ignored() {
    let tok = load(QWEN25);
    let ids = tok.encode("abc STOP def", false).unwrap();
    let mut dec = tok.incremental_decoder(true, vec!["STOP".into()]);
    let d = dec.push(&ids).unwrap();
    assert_eq!(
        (d.text, d.matched_stop, d.finished),
        ("abc ", Some("STOP"), true)
    );
    let d = dec.push(&ids).unwrap();
    assert_eq!((d.text, d.finished), ("", true));
    assert_eq!(dec.finish().unwrap().text, "");
    assert!(dec.is_finished());
}

#[test]
fn unfinished_stop_prefix_is_flushed_at_finish() {
    for name in ALL {
        let tok = load(name);
        let ids = tok.encode("value: ST", false).unwrap();
        let mut dec = tok.incremental_decoder(true, vec!["STOP".into()]);
        let mut sent = String::new();
        for id in &ids {
            sent.push_str(dec.push(&[*id]).unwrap().text);
        }
        assert!(!sent.contains("ST"), "{name}: {sent:?}");
        let d = dec.finish().unwrap();
        assert_eq!((d.matched_stop, d.finished), (None, true));
        sent.push_str(d.text);
        assert_eq!(sent, tok.decode(&ids, true).unwrap(), "{name}");
    }
}

#[test]
fn stop_inside_a_multibyte_sequence_and_trailing_partial_char() {
    // Mistral byte-fallback: 🦙 is four <0x..> tokens.
    let tok = load(MISTRAL);
    let ids = tok.encode("a🦙b", false).unwrap();
    let (deltas, m, _) = run(MISTRAL, &ids, &[1], &["🦙"]);
    assert_eq!(
        (deltas.concat(), m.as_deref()),
        ("a".to_owned(), Some("🦙"))
    );
    // Stream ends in the middle of a character: finish renders it as decode does.
    let cut = &ids[..ids.len() - 2];
    let mut dec = tok.incremental_decoder(true, vec![]);
    let mut out = String::new();
    for id in cut {
        out.push_str(dec.push(&[*id]).unwrap().text);
    }
    out.push_str(dec.finish().unwrap().text);
    assert_eq!(out, tok.decode(cut, true).unwrap());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_groups_equal_full_decode(
        which in 0..ALL.len(),
        groups in proptest::collection::vec(1usize..6, 1..12),
    ) {
        let name = ALL[which];
        let tok = load(name);
        let ids = tok.encode(TEXT, false).unwrap();
        let (deltas, _, _) = run(name, &ids, &groups, &[]);
        prop_assert_eq!(deltas.concat(), tok.decode(&ids, true).unwrap());
    }

    #[test]
    fn random_stop_cuts_at_first_occurrence(
        which in 0..ALL.len(),
        groups in proptest::collection::vec(1usize..5, 1..8),
        start in 0usize..60,
        len in 1usize..6,
    ) {
        let name = ALL[which];
        let tok = load(name);
        let ids = tok.encode(TEXT, false).unwrap();
        let decoded = tok.decode(&ids, true).unwrap();
        let chars: Vec<char> = decoded.chars().collect();
        let stop: String = chars[start..(start + len).min(chars.len())].iter().collect();
        let at = decoded.find(&stop).unwrap();
        let (deltas, matched, finished) = run(name, &ids, &groups, &[stop.as_str()]);
        prop_assert!(finished);
        prop_assert_eq!(matched.as_deref(), Some(stop.as_str()));
        prop_assert_eq!(deltas.concat(), &decoded[..at]);
    }
}

#[test]
fn runs_of_special_tokens_do_not_grow_the_window() {
    let tok = load(QWEN25);
    let mut dec = tok.incremental_decoder(true, vec![]);
    assert_eq!(
        dec.push(&tok.encode("a", false).unwrap()).unwrap().text,
        "a"
    );
    for _ in 0..1000 {
        assert_eq!(dec.push(&[151_643, 151_645]).unwrap().text, "");
    }
    assert!(dec.ids.len() <= 2, "window: {}", dec.ids.len());
    assert_eq!(
        dec.push(&tok.encode(" b", false).unwrap()).unwrap().text,
        " b"
    );
    assert!(
        format!("{dec:?}").len() < 2_000,
        "Debug must not dump the vocabulary"
    );
}
