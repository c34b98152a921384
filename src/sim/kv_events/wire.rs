//! A batch as msgpack, the way msgspec encodes SGLang's `KVEventBatch`: the batch is the array
//! `[ts, events, attn_dp_rank]`; each event is a tag-first array
//! (`["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]`)
//! in 0.5.9, and a map tagged by `"type"` without its unset optional fields in 0.5.23, whose
//! `EventRecorder.enqueue` also merges a store chaining onto the previous store (and
//! consecutive removals) into one event.

use rmpv::Value;

use super::blocks::BlockEvent;
use crate::sim::version::SglangVersion;

/// `StorageMedium.GPU`: every event of the device radix cache names it.
const MEDIUM_GPU: &str = "GPU";

/// One wire event: several pages once merged.
pub(in crate::sim) enum WireEvent {
    Stored {
        hashes: Vec<i64>,
        parent: Option<i64>,
        token_ids: Vec<u32>,
        block_size: usize,
    },
    Removed {
        hashes: Vec<i64>,
    },
    Cleared,
}

/// The events as the publisher's wire carries them; `coalesce` (0.5.23) merges chained stores
/// and consecutive removals.
pub(in crate::sim) fn merge(events: &[BlockEvent], page: usize, coalesce: bool) -> Vec<WireEvent> {
    let mut out: Vec<WireEvent> = Vec::new();
    for ev in events {
        let merged = match (out.last_mut(), ev) {
            (Some(WireEvent::Removed { hashes }), BlockEvent::Removed { hash }) if coalesce => {
                hashes.push(*hash);
                true
            }
            (
                Some(WireEvent::Stored {
                    hashes, token_ids, ..
                }),
                BlockEvent::Stored {
                    hash,
                    parent,
                    token_ids: t,
                },
            ) if coalesce && *parent == hashes.last().copied() => {
                hashes.push(*hash);
                token_ids.extend_from_slice(t);
                true
            }
            _ => false,
        };
        if merged {
            continue;
        }
        out.push(match ev {
            BlockEvent::Stored {
                hash,
                parent,
                token_ids,
            } => WireEvent::Stored {
                hashes: vec![*hash],
                parent: *parent,
                token_ids: token_ids.clone(),
                block_size: page,
            },
            BlockEvent::Removed { hash } => WireEvent::Removed {
                hashes: vec![*hash],
            },
            BlockEvent::Cleared => WireEvent::Cleared,
        });
    }
    out
}

fn ints(v: &[i64]) -> Value {
    Value::Array(v.iter().map(|h| Value::from(*h)).collect())
}

fn tokens(v: &[u32]) -> Value {
    Value::Array(v.iter().map(|t| Value::from(*t)).collect())
}

fn opt(v: Option<i64>) -> Value {
    v.map_or(Value::Nil, Value::from)
}

fn array_event(ev: &WireEvent) -> Value {
    let fields = match ev {
        WireEvent::Stored {
            hashes,
            parent,
            token_ids,
            block_size,
        } => vec![
            Value::from("BlockStored"),
            ints(hashes),
            opt(*parent),
            tokens(token_ids),
            Value::from(*block_size),
            Value::Nil,
            Value::from(MEDIUM_GPU),
        ],
        WireEvent::Removed { hashes } => vec![
            Value::from("BlockRemoved"),
            ints(hashes),
            Value::from(MEDIUM_GPU),
        ],
        WireEvent::Cleared => vec![Value::from("AllBlocksCleared")],
    };
    Value::Array(fields)
}

fn map_event(ev: &WireEvent) -> Value {
    let field = |k: &str, v: Value| (Value::from(k), v);
    let fields = match ev {
        WireEvent::Stored {
            hashes,
            parent,
            token_ids,
            block_size,
        } => vec![
            field("type", Value::from("BlockStored")),
            field("block_hashes", ints(hashes)),
            field("parent_block_hash", opt(*parent)),
            field("token_ids", tokens(token_ids)),
            field("block_size", Value::from(*block_size)),
            field("lora_id", Value::Nil),
            field("medium", Value::from(MEDIUM_GPU)),
        ],
        WireEvent::Removed { hashes } => vec![
            field("type", Value::from("BlockRemoved")),
            field("block_hashes", ints(hashes)),
            field("medium", Value::from(MEDIUM_GPU)),
        ],
        WireEvent::Cleared => vec![field("type", Value::from("AllBlocksCleared"))],
    };
    Value::Map(fields)
}

/// The msgpack payload of one `KVEventBatch`.
pub fn encode_batch(
    version: SglangVersion,
    ts: f64,
    events: &[BlockEvent],
    page: usize,
    dp_rank: u32,
) -> Vec<u8> {
    let v0_5_9 = version == SglangVersion::V0_5_9;
    let events: Vec<Value> = merge(events, page, !v0_5_9)
        .iter()
        .map(|e| if v0_5_9 { array_event(e) } else { map_event(e) })
        .collect();
    let batch = Value::Array(vec![
        Value::F64(ts),
        Value::Array(events),
        Value::from(dp_rank),
    ]);
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, &batch);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Value {
        rmpv::decode::read_value(&mut &bytes[..]).unwrap()
    }

    fn stored(hash: i64, parent: Option<i64>) -> BlockEvent {
        BlockEvent::Stored {
            hash,
            parent,
            token_ids: vec![7, 8],
        }
    }

    #[test]
    fn v0_5_9_sends_one_tag_first_array_per_page() {
        let ev = [stored(1, None), stored(2, Some(1)), BlockEvent::Cleared];
        let v = decode(&encode_batch(SglangVersion::V0_5_9, 1.5, &ev, 2, 0));
        let Value::Array(b) = v else { panic!() };
        assert_eq!(b[0], Value::F64(1.5));
        assert_eq!(b[2], Value::from(0));
        let Value::Array(events) = &b[1] else {
            panic!()
        };
        assert_eq!(events.len(), 3);
        assert_eq!(
            events[1],
            Value::Array(vec![
                "BlockStored".into(),
                Value::Array(vec![2.into()]),
                1.into(),
                Value::Array(vec![7.into(), 8.into()]),
                2.into(),
                Value::Nil,
                "GPU".into()
            ])
        );
        assert_eq!(events[2], Value::Array(vec!["AllBlocksCleared".into()]));
    }

    #[test]
    fn v0_5_23_merges_chained_stores_into_tagged_maps() {
        let ev = [
            stored(1, None),
            stored(2, Some(1)),
            stored(9, None),
            BlockEvent::Removed { hash: 1 },
            BlockEvent::Removed { hash: 2 },
        ];
        let v = decode(&encode_batch(SglangVersion::V0_5_23, 0.0, &ev, 2, 3));
        let Value::Array(b) = v else { panic!() };
        let Value::Array(events) = &b[1] else {
            panic!()
        };
        assert_eq!(events.len(), 3);
        let Value::Map(first) = &events[0] else {
            panic!()
        };
        assert_eq!(first[0], ("type".into(), "BlockStored".into()));
        assert_eq!(
            first[1],
            (
                "block_hashes".into(),
                Value::Array(vec![1.into(), 2.into()])
            )
        );
        assert_eq!(first[2], ("parent_block_hash".into(), Value::Nil));
        let Value::Map(removed) = &events[2] else {
            panic!()
        };
        assert_eq!(
            removed[1],
            (
                "block_hashes".into(),
                Value::Array(vec![1.into(), 2.into()])
            )
        );
        assert_eq!(b[2], Value::from(3));
    }
}
