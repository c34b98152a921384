//! `SubscribeKvEvents` as `smg-grpc-servicer`'s relay (`kv_relay.py`) serves it for SGLang: the
//! ZMQ publisher's batches under the publisher's own sequence numbers, from the subscription on
//! (no history: a non-zero `start_sequence_number` is `OUT_OF_RANGE`), the rank on every batch,
//! each event normalized as the relay does a device-cache event (tier `DEVICE`, locality
//! `LOCAL`, medium `GPU`, event ids counting per stream from 1). A subscriber that falls behind
//! the tap lost batches the relay could not replay: the stream ends with `DATA_LOSS`, which
//! tells the gateway to clear the worker and resubscribe. No load records (`EngineLoad`): the
//! field is optional and the gateway keeps polling `GetLoads`.

use std::sync::Arc;

use futures_util::stream::{self, BoxStream, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use tonic::Status;

use crate::protocol::grpc::smg::grpc::common;
use crate::sim::kv_events::publisher::{Published, Tap};
use crate::sim::kv_events::wire::{merge, WireEvent};
use crate::sim::version::SglangVersion;

const MEDIUM_GPU: &str = "GPU";

/// What one stream needs to turn the tap's batches into the relay's.
#[derive(Debug, Clone, Copy)]
pub struct Relay {
    pub version: SglangVersion,
    pub page_size: usize,
    pub dp_rank: i32,
}

/// The stream for one `SubscribeKvEvents` call, or the servicer's refusal.
pub fn subscribe(
    tap: Option<&Tap>,
    start_sequence_number: u64,
    relay: Relay,
) -> Result<BoxStream<'static, Result<common::KvEventBatch, Status>>, Status> {
    let Some(tap) = tap else {
        return Err(Status::unimplemented(
            "KV cache events not enabled. Start SGLang with --kv-events-config '{\"publisher\": \"zmq\"}'",
        ));
    };
    if start_sequence_number != 0 {
        return Err(Status::out_of_range(
            "KV event replay cursors are per subscription; resubscribe with zero and rebuild",
        ));
    }
    let state = (tap.subscribe(), 0u64, false);
    Ok(
        stream::unfold(state, move |(mut rx, mut event_id, ended)| async move {
            if ended {
                return None;
            }
            match rx.recv().await {
                Ok(published) => {
                    let batch = to_proto(&published, relay, &mut event_id);
                    Some((Ok(batch), (rx, event_id, false)))
                }
                Err(RecvError::Lagged(n)) => {
                    let lost = Status::data_loss(format!(
                        "the subscriber fell {n} KV event batches behind; clear and resubscribe"
                    ));
                    Some((Err(lost), (rx, event_id, true)))
                }
                Err(RecvError::Closed) => None,
            }
        })
        .boxed(),
    )
}

fn to_proto(p: &Arc<Published>, relay: Relay, event_id: &mut u64) -> common::KvEventBatch {
    let coalesce = relay.version != SglangVersion::V0_5_9;
    let page = relay.page_size.max(1);
    let events = merge(&p.events, page, coalesce)
        .into_iter()
        .map(|e| {
            *event_id += 1;
            common::KvCacheEvent {
                event_id: *event_id,
                data: Some(event(e, page)),
            }
        })
        .collect();
    common::KvEventBatch {
        sequence_number: p.seq,
        timestamp: p.ts,
        events,
        dp_rank: Some(relay.dp_rank),
        ..Default::default()
    }
}

fn event(e: WireEvent, page: usize) -> common::kv_cache_event::Data {
    use common::kv_cache_event::Data;
    let device = Some(common::KvCacheTier::Device as i32);
    let local = Some(common::KvCacheLocality::Local as i32);
    match e {
        WireEvent::Stored {
            hashes,
            parent,
            token_ids,
            ..
        } => Data::Stored(common::KvBlocksStored {
            blocks: hashes
                .iter()
                .zip(token_ids.chunks_exact(page))
                .map(|(h, tokens)| common::KvBlock {
                    block_hash: *h,
                    token_ids: tokens.to_vec(),
                    block_size: i32::try_from(page).unwrap_or(i32::MAX),
                    ..Default::default()
                })
                .collect(),
            parent_block_hash: parent,
            tier: device,
            medium: Some(MEDIUM_GPU.into()),
            locality: local,
            ..Default::default()
        }),
        WireEvent::Removed { hashes } => Data::Removed(common::KvBlocksRemoved {
            block_hashes: hashes,
            tier: device,
            medium: Some(MEDIUM_GPU.into()),
            locality: local,
            ..Default::default()
        }),
        WireEvent::Cleared => Data::Cleared(common::KvCacheCleared::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::kv_events::blocks::BlockEvent;
    use tokio::sync::broadcast;

    #[tokio::test]
    async fn relays_batches_from_the_subscription_on_and_ends_lagging_streams() {
        let (tap, _) = broadcast::channel(2);
        let relay = Relay {
            version: SglangVersion::V0_5_23,
            page_size: 2,
            dp_rank: 0,
        };
        assert_eq!(
            subscribe(None, 0, relay).err().map(|s| s.code()),
            Some(tonic::Code::Unimplemented)
        );
        assert_eq!(
            subscribe(Some(&tap), 5, relay).err().map(|s| s.code()),
            Some(tonic::Code::OutOfRange)
        );
        let mut s = subscribe(Some(&tap), 0, relay).unwrap();
        let stored = |hash, parent| BlockEvent::Stored {
            hash,
            parent,
            token_ids: vec![1, 2],
        };
        let _ = tap.send(Arc::new(Published {
            seq: 3,
            ts: 1.0,
            events: vec![stored(10, None), stored(11, Some(10)), BlockEvent::Cleared],
        }));
        let b = s.next().await.unwrap().unwrap();
        assert_eq!((b.sequence_number, b.dp_rank), (3, Some(0)));
        // 0.5.23 merges the chained stores into one event of two blocks.
        assert_eq!(b.events.len(), 2);
        assert_eq!(b.events[1].event_id, 2);
        let Some(common::kv_cache_event::Data::Stored(st)) = &b.events[0].data else {
            panic!("{b:?}")
        };
        assert_eq!(st.blocks.len(), 2);
        assert_eq!(st.blocks[1].block_hash, 11);
        assert_eq!(st.tier, Some(common::KvCacheTier::Device as i32));
        for seq in 4..8 {
            let _ = tap.send(Arc::new(Published {
                seq,
                ts: 1.0,
                events: vec![],
            }));
        }
        let lost = s.next().await.unwrap().unwrap_err();
        assert_eq!(lost.code(), tonic::Code::DataLoss);
        assert!(s.next().await.is_none());
    }
}
