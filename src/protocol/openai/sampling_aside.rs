//! A request and its sampling fields from one pass over the body.
//!
//! The request types skip [`Sampling`]'s fields (a flattened struct would buffer the whole body
//! and lose the field's name in type errors), so they used to be read by a second parse of the
//! same bytes, which for a long prompt scans its messages twice. Here the body's top-level map is
//! read once: a key `Sampling` reads is taken aside with its (small) value before the request's
//! own visitor sees the map, and [`Taken::sampling`] reads them afterwards.

use std::borrow::Cow;
use std::fmt;

use serde::de::value::MapDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::Sampling;

/// Sampling fields met at the top level of a body, in order.
#[derive(Debug, Default)]
pub struct Taken(Vec<(&'static str, Value)>);

impl Taken {
    /// The sampling fields read as `Sampling`; an error here means a field has the wrong type
    /// (the caller may parse the body again to name it).
    pub fn sampling(self) -> Result<Sampling, serde_json::Error> {
        Sampling::deserialize(MapDeserializer::new(self.0.into_iter()))
    }
}

/// Wraps a deserializer whose input is a request object: `T::deserialize` of the wrapper reads
/// `T` and leaves the sampling fields in `taken`. It expects `T` to be a struct read from a map.
pub struct TakeSampling<'t, D> {
    inner: D,
    taken: &'t mut Taken,
}

impl<'t, D> TakeSampling<'t, D> {
    pub fn new(inner: D, taken: &'t mut Taken) -> TakeSampling<'t, D> {
        TakeSampling { inner, taken }
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for TakeSampling<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(TopLevel {
            inner: visitor,
            taken: self.taken,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

struct TopLevel<'t, V> {
    inner: V,
    taken: &'t mut Taken,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for TopLevel<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Entries {
            inner: map,
            taken: self.taken,
        })
    }
}

/// The top-level map with the sampling fields taken out.
struct Entries<'t, A> {
    inner: A,
    taken: &'t mut Taken,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.inner.next_key_seed(Key)? {
            let Some(&field) = Sampling::FIELDS.iter().find(|f| **f == key) else {
                let key: de::value::CowStrDeserializer<A::Error> = key.into_deserializer();
                return seed.deserialize(key).map(Some);
            };
            if self.taken.0.iter().any(|(k, _)| *k == field) {
                return Err(de::Error::duplicate_field(field));
            }
            let value: Value = self.inner.next_value()?;
            self.taken.0.push((field, value));
        }
        Ok(None)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.next_value_seed(seed)
    }
}

/// A key, borrowed from the body where it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Cow<'de, str>, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::openai::ChatCompletionRequest;

    fn split(body: &str) -> Result<(ChatCompletionRequest, Taken), serde_json::Error> {
        let mut taken = Taken::default();
        let de = &mut serde_json::Deserializer::from_str(body);
        let req = ChatCompletionRequest::deserialize(TakeSampling::new(&mut *de, &mut taken))?;
        de.end()?;
        Ok((req, taken))
    }

    #[test]
    fn sampling_fields_are_read_with_the_request() {
        let body = r#"{"model":"m","temperature":0.5,"messages":[{"role":"user","content":"hi"}],
            "max_tokens":7,"stop":["a","b"],"top_k":3,"seed":1,"stream":true}"#;
        let (req, taken) = split(body).unwrap();
        assert_eq!(req.model, "m");
        assert!(req.stream);
        assert_eq!(req.messages.len(), 1);
        let s = taken.sampling().unwrap();
        assert_eq!(s.temperature, Some(0.5));
        assert_eq!(s.max_tokens, Some(7));
        assert_eq!(s.top_k, Some(3));
        assert_eq!(s.seed, Some(1));
        assert_eq!(
            s.stop.map(|s| s.into_vec()),
            Some(vec!["a".into(), "b".into()])
        );
        // Nested keys of the same names are the request's own, not sampling fields.
        let (req, taken) =
            split(r#"{"model":"m","messages":[{"role":"user","content":"x","seed":9}],"n":2}"#)
                .unwrap();
        assert_eq!(req.messages[0]["seed"], 9);
        assert_eq!(taken.sampling().unwrap().n, Some(2));
    }

    /// `FIELDS` decides which keys reach `Sampling`: a field missing from it would be dropped.
    #[test]
    fn the_taken_keys_are_all_of_samplings_fields() {
        struct Fields(Vec<&'static str>);
        impl<'de> Deserializer<'de> for &mut Fields {
            type Error = de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("only a struct"))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = fields.to_vec();
                Err(de::Error::custom("seen"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let mut seen = Fields(Vec::new());
        assert!(Sampling::deserialize(&mut seen).is_err());
        assert_eq!(seen.0, Sampling::FIELDS);
    }

    #[test]
    fn a_key_with_escapes_still_matches() {
        let (_, taken) =
            split(r#"{"model":"m","messages":[],"max\u005ftokens":4,"m\u006fdel2":1}"#).unwrap();
        assert_eq!(taken.sampling().unwrap().max_tokens, Some(4));
    }

    #[test]
    fn wrong_types_and_repeats_are_errors() {
        let (_, taken) = split(r#"{"model":"m","messages":[],"temperature":"hot"}"#).unwrap();
        assert!(taken.sampling().is_err());
        let repeated = split(r#"{"model":"m","messages":[],"top_p":1,"top_p":0.5}"#);
        assert!(repeated
            .unwrap_err()
            .to_string()
            .contains("duplicate field `top_p`"));
        assert!(split(r#"["m",[]]"#).is_err());
        assert!(split(r#"{"model":"m"}"#).is_err());
    }
}
