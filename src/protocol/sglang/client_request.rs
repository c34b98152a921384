//! A `/generate` body as a client sends it: the prompt fields typed (token ids read straight
//! into `u32` vectors, never generic JSON values), everything else kept as JSON to forward.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::protocol::openai::Prompt;

#[derive(Debug, Default)]
pub struct ClientGenerateRequest {
    /// A string or a batch of strings (`Prompt::Text` / `Prompt::Texts`; the handler refuses
    /// the other shapes).
    pub text: Option<Prompt>,
    /// Ids or a batch of id lists.
    pub input_ids: Option<Prompt>,
    /// Every other field, in the client's order.
    pub rest: Map<String, Value>,
}

impl<'de> Deserialize<'de> for ClientGenerateRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ClientGenerateRequest;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut req = ClientGenerateRequest::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "text" => req.text = map.next_value()?,
                        "input_ids" => req.input_ids = map.next_value()?,
                        _ => {
                            let value = map.next_value()?;
                            if req.rest.insert(key.clone(), value).is_some() {
                                return Err(de::Error::custom(format!("duplicate field `{key}`")));
                            }
                        }
                    }
                }
                Ok(req)
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for ClientGenerateRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (k, v) in &self.rest {
            map.serialize_entry(k, v)?;
        }
        for (key, prompt) in [("text", &self.text), ("input_ids", &self.input_ids)] {
            match prompt {
                None => {}
                Some(Prompt::Text(t)) => map.serialize_entry(key, t)?,
                Some(Prompt::Texts(t)) => map.serialize_entry(key, t)?,
                Some(Prompt::Ids(ids)) => map.serialize_entry(key, ids)?,
                Some(Prompt::IdBatches(b)) => map.serialize_entry(key, b)?,
            }
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_fields_are_typed_and_the_rest_is_forwarded_as_sent() {
        let body = json!({"input_ids": [[1, 2], [3]], "sampling_params": {"max_new_tokens": 2}, "stream": true});
        let req: ClientGenerateRequest = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(
            req.input_ids,
            Some(Prompt::IdBatches(vec![vec![1, 2], vec![3]]))
        );
        assert_eq!(serde_json::to_value(&req).unwrap(), body);
        for bad in [
            json!({"input_ids": [1, "x"]}),
            json!({"text": 5}),
            json!([1]),
        ] {
            assert!(
                serde_json::from_value::<ClientGenerateRequest>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
