//! The completions `prompt` (and `/generate`'s `text` / `input_ids`): a text, token ids, or a
//! batch of either. Read element by element into typed vectors: serde's untagged enums would
//! first buffer the whole value as generic content, ~32 bytes per id where a `u32` takes 4.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    Texts(Vec<String>),
    IdBatches(Vec<Vec<u32>>),
}

/// A batch's first element decides what the others must be.
enum First {
    Text(String),
    Id(u32),
    Ids(Vec<u32>),
}

impl<'de> Deserialize<'de> for First {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = First;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a token id or a list of token ids")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<First, E> {
                Ok(First::Text(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<First, E> {
                Ok(First::Text(s))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<First, E> {
                u32::try_from(n)
                    .map(First::Id)
                    .map_err(|_| E::custom(format!("token id {n} is out of range")))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<First, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(format!("token ids are not negative, got {n}")))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<First, A::Error> {
                Vec::<u32>::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(First::Ids)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Prompt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Prompt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a list of token ids, or a list of either")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Prompt, E> {
                Ok(Prompt::Text(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Prompt, E> {
                Ok(Prompt::Text(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Prompt, A::Error> {
                Ok(match seq.next_element::<First>()? {
                    None => Prompt::Ids(Vec::new()),
                    Some(First::Id(id)) => {
                        let mut ids = vec![id];
                        while let Some(id) = seq.next_element()? {
                            ids.push(id);
                        }
                        Prompt::Ids(ids)
                    }
                    Some(First::Text(t)) => {
                        let mut texts = vec![t];
                        while let Some(t) = seq.next_element()? {
                            texts.push(t);
                        }
                        Prompt::Texts(texts)
                    }
                    Some(First::Ids(ids)) => {
                        let mut batches = vec![ids];
                        while let Some(ids) = seq.next_element()? {
                            batches.push(ids);
                        }
                        Prompt::IdBatches(batches)
                    }
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Prompt, String> {
        serde_json::from_str(s).map_err(|e| e.to_string())
    }

    #[test]
    fn every_shape_is_read_into_its_typed_form() {
        assert_eq!(parse(r#""hi""#), Ok(Prompt::Text("hi".into())));
        assert_eq!(parse("[1, 2]"), Ok(Prompt::Ids(vec![1, 2])));
        assert_eq!(
            parse(r#"["a", "b"]"#),
            Ok(Prompt::Texts(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            parse("[[1], [2, 3]]"),
            Ok(Prompt::IdBatches(vec![vec![1], vec![2, 3]]))
        );
        assert_eq!(parse("[]"), Ok(Prompt::Ids(vec![])));
    }

    #[test]
    fn mixed_or_out_of_range_elements_are_refused() {
        for bad in [
            r#"[1, "a"]"#,
            r#"["a", 1]"#,
            "[[1], 2]",
            "[-1]",
            "[4294967296]",
            "[1.5]",
            "{}",
            "3",
            "[[1, -2]]",
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
    }
}
