use super::*;
use crate::tokenize::tests::{asset_dir, MISTRAL, QWEN25, QWEN3, SMOLLM2};

fn hf(name: &str) -> tokenizers::Tokenizer {
    let path = asset_dir(name).join("tokenizer.json");
    tokenizers::Tokenizer::from_file(path).unwrap()
}

/// Words the load-time check never saw: other letters, lengths and real words.
fn other_words() -> Vec<String> {
    let mut out: Vec<String> = ["The", "quick", "BROWN", "foxes", "Jumped", "overly", "LAZY"]
        .into_iter()
        .map(String::from)
        .collect();
    for n in 0..600u64 {
        let mut x = (n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let len = 1 + (x % 19) as usize;
        let mut w: String = (0..len)
            .map(|_| {
                x = x.rotate_left(7).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                char::from(b'a' + (x >> 33) as u8 % 26)
            })
            .collect();
        match n % 3 {
            0 => w.make_ascii_uppercase(),
            1 => w[..1].make_ascii_uppercase(),
            _ => {}
        }
        out.push(if n % 2 == 0 { format!(" {w}") } else { w });
    }
    out
}

#[test]
fn plain_words_get_the_pipelines_ids_on_byte_level_bpe_tokenizers() {
    for name in [SMOLLM2, QWEN25, QWEN3] {
        let hf = hf(name);
        let words = PlainWords::new(&hf).unwrap_or_else(|| panic!("{name}: no quick path"));
        for w in other_words() {
            let pipeline = hf.encode(w.as_str(), false).unwrap();
            let quick = words.encode(&hf, &w).unwrap();
            assert_eq!(quick, pipeline.get_ids(), "{name}: {w:?}");
        }
    }
}

#[test]
fn only_plain_words_take_the_quick_path() {
    let hf = hf(SMOLLM2);
    let words = PlainWords::new(&hf).unwrap();
    for other in [
        "",
        " ",
        "  word",
        "camelCase",
        " wordS",
        "word.",
        " two words",
        " naïve",
        "x1",
        "'tis",
        "\nword",
        "word ",
    ] {
        assert!(words.encode(&hf, other).is_none(), "{other:?}");
    }
    for plain in ["word", " Word", " WORD", "I", " a", "ABCdef"] {
        assert!(words.encode(&hf, plain).is_some(), "{plain:?}");
    }
}

#[test]
fn a_tokenizer_that_is_not_byte_level_keeps_the_pipeline() {
    // Mistral's SentencePiece BPE marks a word's space with `▁` and prepends one to the text.
    assert!(PlainWords::new(&hf(MISTRAL)).is_none());
}

#[test]
fn an_added_token_of_letters_turns_the_quick_path_off() {
    let mut hf = hf(SMOLLM2);
    assert!(PlainWords::new(&hf).is_some());
    hf.add_tokens([tokenizers::AddedToken::from("zorblat", false)])
        .unwrap();
    assert!(PlainWords::new(&hf).is_none());
}

#[test]
fn a_normalizer_that_changes_letters_fails_the_check() {
    let mut hf = hf(SMOLLM2);
    hf.with_normalizer(Some(tokenizers::normalizers::Lowercase))
        .unwrap();
    assert!(PlainWords::new(&hf).is_none());
}

#[test]
fn merges_give_the_models_own_tokens_for_thousands_of_made_up_words() {
    let mut x: u64 = 0x0DDB_1A5E_5BAD_5EED;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for name in [SMOLLM2, QWEN25, QWEN3] {
        let hf = hf(name);
        let words = PlainWords::new(&hf).unwrap();
        let ModelWrapper::BPE(bpe) = hf.get_model() else {
            panic!("{name}: not BPE");
        };
        for _ in 0..4000 {
            // Few letters, so that pairs repeat ("aaaa", "abab") and merges of equal rank meet.
            let alphabet = 2 + next(25) as u8;
            let len = 1 + next(24) as usize;
            let mut word: String = (0..len)
                .map(|_| char::from(b'a' + next(u64::from(alphabet)) as u8))
                .collect();
            if next(2) == 0 {
                word[..1].make_ascii_uppercase();
            }
            let model: Vec<u32> = tokenizers::Model::tokenize(bpe, &format!("Ġ{word}"))
                .unwrap()
                .iter()
                .map(|t| t.id)
                .collect();
            assert_eq!(
                words.encode(&hf, &format!(" {word}")),
                Some(model),
                "{name}: {word:?}"
            );
        }
    }
}

#[test]
fn a_model_that_ignores_merges_for_whole_words_is_followed() {
    // Llama 3's model looks a whole pre-token up before merging; give SmolLM2's that flag and a
    // word whose entry the merges would never reach.
    let path = asset_dir(SMOLLM2).join("tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let vocab = json["model"]["vocab"].as_object_mut().unwrap();
    let id = u32::try_from(vocab.len()).unwrap();
    vocab.insert("Ġzqxjv".into(), id.into());
    let merged = |ignore: bool| {
        let mut json = json.clone();
        json["model"]["ignore_merges"] = ignore.into();
        let hf = tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&json).unwrap()).unwrap();
        let words = PlainWords::new(&hf).unwrap();
        let quick = words.encode(&hf, " zqxjv").unwrap();
        assert_eq!(quick, hf.encode(" zqxjv", false).unwrap().get_ids());
        quick
    };
    assert_eq!(merged(true), [id]);
    assert_ne!(merged(false), [id]);
}

#[test]
fn words_merged_together_get_the_ids_each_gets_alone() {
    for name in [SMOLLM2, QWEN25] {
        let hf = hf(name);
        let words = PlainWords::new(&hf).unwrap();
        // Plain words of every length among pieces that are not, in one call.
        let mut pieces = other_words();
        for (k, other) in [" naïve", "x1", "", "word.", " two words"]
            .iter()
            .enumerate()
        {
            pieces.insert(k * 97, (*other).to_owned());
        }
        let asked: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let together = words.encode_many(&hf, &asked);
        assert_eq!(together.len(), asked.len());
        for (piece, ids) in asked.iter().zip(together) {
            let pipeline = is_plain(piece.strip_prefix(' ').unwrap_or(piece))
                .then(|| hf.encode(*piece, false).unwrap().get_ids().to_vec());
            assert_eq!(ids, pipeline, "{name}: {piece:?}");
        }
    }
}
