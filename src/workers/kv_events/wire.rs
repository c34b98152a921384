//! SGLang's KV-event messages, decoded: `[topic, seq (8 bytes, big-endian), payload]` where the
//! payload is msgspec's msgpack of `KVEventBatch`, the array `[ts, events, attn_dp_rank]`.
//! Events are tag-first arrays in 0.5.9 (`["BlockStored", block_hashes, parent_block_hash,
//! token_ids, block_size, lora_id, medium]`) and maps tagged by `"type"` in 0.5.23 (which also
//! merges a chain of stored pages into one event, and adds optional fields); both are read.

use rmpv::Value;

/// A `BlockStored`: `hashes[i]` names the page `token_ids[i*block_size..][..block_size]`, each
/// page chained onto the one before, the first onto `parent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub hashes: Vec<i64>,
    pub parent: Option<i64>,
    pub token_ids: Vec<u32>,
    pub block_size: usize,
    /// The device cache (medium unset or `GPU`) of the base model, without a cache salt: the
    /// blocks a plain request can reuse. Host-tier, LoRA and salted blocks are not.
    pub device_tier: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Stored(Stored),
    Removed {
        hashes: Vec<i64>,
        device_tier: bool,
    },
    Cleared,
    /// An event type this gateway does not know (a newer engine's).
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub ts: f64,
    pub events: Vec<Event>,
    pub dp_rank: Option<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("a KV-event message has {0} frames, not 3")]
    Frames(usize),
    #[error("a KV-event sequence number is {0} bytes, not 8")]
    Seq(usize),
    #[error("a KV-event payload is not msgpack: {0}")]
    Msgpack(String),
    #[error("a KV-event payload is not a KVEventBatch: {0}")]
    Shape(&'static str),
}

/// The sequence number frame (−1 marks the end of a replay).
pub fn seq(frame: &[u8]) -> Result<i64, WireError> {
    let bytes: [u8; 8] = frame.try_into().map_err(|_| WireError::Seq(frame.len()))?;
    Ok(i64::from_be_bytes(bytes))
}

pub fn decode_batch(payload: &[u8]) -> Result<Batch, WireError> {
    let value = rmpv::decode::read_value(&mut &payload[..])
        .map_err(|e| WireError::Msgpack(e.to_string()))?;
    let Value::Array(fields) = value else {
        return Err(WireError::Shape("the batch is not an array"));
    };
    let ts = fields.first().and_then(Value::as_f64).unwrap_or(0.0);
    let Some(Value::Array(events)) = fields.get(1) else {
        return Err(WireError::Shape("the batch has no event list"));
    };
    let dp_rank = fields
        .get(2)
        .and_then(Value::as_u64)
        .and_then(|r| u32::try_from(r).ok());
    let events = events.iter().map(event).collect::<Result<_, _>>()?;
    Ok(Batch {
        ts,
        events,
        dp_rank,
    })
}

/// An event's fields by name, from either encoding.
struct Fields<'a> {
    positional: Option<&'a [Value]>,
    named: Option<&'a [(Value, Value)]>,
}

impl<'a> Fields<'a> {
    /// `index` counts after the tag in the array form.
    fn get(&self, name: &str, index: usize) -> Option<&'a Value> {
        if let Some(p) = self.positional {
            return p.get(index + 1);
        }
        self.named?
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v)
    }

    fn is_unset(&self, name: &str, index: usize) -> bool {
        self.get(name, index).is_none_or(Value::is_nil)
    }
}

fn ints(v: Option<&Value>) -> Result<Vec<i64>, WireError> {
    let Some(Value::Array(items)) = v else {
        return Err(WireError::Shape("block_hashes is not a list"));
    };
    items
        .iter()
        .map(|h| {
            h.as_i64()
                .ok_or(WireError::Shape("a block hash is not an int64"))
        })
        .collect()
}

fn event(v: &Value) -> Result<Event, WireError> {
    let (tag, fields) = match v {
        Value::Array(items) => (
            items.first().and_then(Value::as_str),
            Fields {
                positional: Some(items),
                named: None,
            },
        ),
        Value::Map(pairs) => (
            pairs
                .iter()
                .find(|(k, _)| k.as_str() == Some("type"))
                .and_then(|(_, v)| v.as_str()),
            Fields {
                positional: None,
                named: Some(pairs),
            },
        ),
        _ => return Err(WireError::Shape("an event is neither an array nor a map")),
    };
    let gpu = |index: usize| {
        fields
            .get("medium", index)
            .is_none_or(|m| m.is_nil() || m.as_str() == Some("GPU"))
    };
    Ok(match tag {
        Some("BlockStored") => {
            let token_ids = match fields.get("token_ids", 2) {
                Some(Value::Array(t)) => t
                    .iter()
                    .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or(WireError::Shape("a token id is not a u32"))?,
                _ => return Err(WireError::Shape("token_ids is not a list")),
            };
            let block_size = fields
                .get("block_size", 3)
                .and_then(Value::as_u64)
                .and_then(|b| usize::try_from(b).ok())
                .filter(|b| *b > 0)
                .ok_or(WireError::Shape("block_size is not a positive int"))?;
            let hashes = ints(fields.get("block_hashes", 0))?;
            if token_ids.len() != hashes.len() * block_size {
                return Err(WireError::Shape("token_ids do not fill the blocks"));
            }
            Event::Stored(Stored {
                parent: fields.get("parent_block_hash", 1).and_then(Value::as_i64),
                device_tier: gpu(5)
                    && fields.is_unset("lora_id", 4)
                    && fields.is_unset("cache_salt", 6)
                    && fields.is_unset("lora_name", 8),
                hashes,
                token_ids,
                block_size,
            })
        }
        Some("BlockRemoved") => Event::Removed {
            hashes: ints(fields.get("block_hashes", 0))?,
            device_tier: gpu(1),
        },
        Some("AllBlocksCleared") => Event::Cleared,
        _ => Event::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(v: Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &v).unwrap();
        out
    }

    #[test]
    fn reads_tag_first_arrays_and_tagged_maps() {
        let array = Value::Array(vec![
            "BlockStored".into(),
            Value::Array(vec![(-5i64).into(), 6.into()]),
            Value::Nil,
            Value::Array((1..=4).map(Value::from).collect()),
            2.into(),
            Value::Nil,
            "GPU".into(),
        ]);
        let map = Value::Map(vec![
            ("type".into(), "BlockRemoved".into()),
            ("block_hashes".into(), Value::Array(vec![7.into()])),
            ("medium".into(), "CPU_PINNED".into()),
        ]);
        let cleared = Value::Array(vec!["AllBlocksCleared".into()]);
        let batch = Value::Array(vec![
            Value::F64(2.5),
            Value::Array(vec![array, map, cleared]),
            1.into(),
        ]);
        let b = decode_batch(&encode(batch)).unwrap();
        assert_eq!(b.dp_rank, Some(1));
        assert_eq!(
            b.events[0],
            Event::Stored(Stored {
                hashes: vec![-5, 6],
                parent: None,
                token_ids: vec![1, 2, 3, 4],
                block_size: 2,
                device_tier: true
            })
        );
        assert_eq!(
            b.events[1],
            Event::Removed {
                hashes: vec![7],
                device_tier: false
            }
        );
        assert_eq!(b.events[2], Event::Cleared);
        assert!(decode_batch(b"\xc1").is_err());
        assert_eq!(seq(&(-1i64).to_be_bytes()), Ok(-1));
        assert!(seq(b"abc").is_err());
    }
}
