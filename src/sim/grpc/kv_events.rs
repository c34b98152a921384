//! `SubscribeKvEvents` as `smg-grpc-servicer`'s relay (`kv_relay.py`) serves it for SGLang: every
//! DP rank's ZMQ publisher on one stream, each batch under its publisher's own sequence
//! numbers, from the subscription on (no history: a non-zero `start_sequence_number` is
//! `OUT_OF_RANGE`), the publisher's rank on every batch,
//! each event normalized as the relay does a device-cache event (tier `DEVICE`, locality
//! `LOCAL`, medium `GPU`, event ids counting per stream from 1). A subscriber that falls behind
//! the tap lost batches the relay could not replay: the stream ends with `DATA_LOSS`, which
//! tells the gateway to clear the worker and resubscribe. No load records (`EngineLoad`): the
//! field is optional and the gateway keeps polling `GetLoads`.

use std::sync::Arc;

use futures_util::stream::{self, BoxStream, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tonic::Status;

use crate::protocol::grpc::smg::grpc::common;
use crate::sim::kv_events::publisher::{Published, Tap};
use crate::sim::kv_events::wire::{merge, WireEvent};
use crate::sim::version::SglangVersion;

const MEDIUM_GPU: &str = "GPU";
/// Batches a call's stream holds from its ranks' forwarders before they wait.
const FORWARD_BATCHES: usize = 64;

/// What one stream needs to turn the tap's batches into the relay's.
#[derive(Debug, Clone, Copy)]
pub struct Relay {
    pub version: SglangVersion,
    pub page_size: usize,
}

/// A rank's batch, or how many batches that rank's subscriber lost.
type Relayed = Result<(i32, Arc<Published>), u64>;

/// The stream for one `SubscribeKvEvents` call over every rank's tap (`taps[r]` is rank `r`'s
/// publisher), or the servicer's refusal.
pub fn subscribe(
    taps: &[Tap],
    start_sequence_number: u64,
    relay: Relay,
) -> Result<BoxStream<'static, Result<common::KvEventBatch, Status>>, Status> {
    if taps.is_empty() {
        return Err(Status::unimplemented(
            "KV cache events not enabled. Start SGLang with --kv-events-config '{\"publisher\": \"zmq\"}'",
        ));
    }
    if start_sequence_number != 0 {
        return Err(Status::out_of_range(
            "KV event replay cursors are per subscription; resubscribe with zero and rebuild",
        ));
    }
    // One forwarder per rank into the call's stream; each subscribes now, so nothing published
    // after the call is missed, and ends when the call does.
    let (tx, rx) = mpsc::channel::<Relayed>(FORWARD_BATCHES);
    for (rank, tap) in taps.iter().enumerate() {
        let mut sub = tap.subscribe();
        let tx = tx.clone();
        let rank = i32::try_from(rank).unwrap_or(i32::MAX);
        tokio::spawn(async move {
            loop {
                let item = match sub.recv().await {
                    Ok(p) => Ok((rank, p)),
                    Err(RecvError::Lagged(n)) => Err(n),
                    Err(RecvError::Closed) => return,
                };
                let lost = item.is_err();
                if tx.send(item).await.is_err() || lost {
                    return;
                }
            }
        });
    }
    drop(tx);
    let state = (rx, 0u64, false);
    Ok(
        stream::unfold(state, move |(mut rx, mut event_id, ended)| async move {
            if ended {
                return None;
            }
            match rx.recv().await? {
                Ok((rank, published)) => {
                    let batch = to_proto(&published, relay, rank, &mut event_id);
                    Some((Ok(batch), (rx, event_id, false)))
                }
                Err(n) => {
                    let lost = Status::data_loss(format!(
                        "the subscriber fell {n} KV event batches behind; clear and resubscribe"
                    ));
                    Some((Err(lost), (rx, event_id, true)))
                }
            }
        })
        .boxed(),
    )
}

fn to_proto(
    p: &Arc<Published>,
    relay: Relay,
    dp_rank: i32,
    event_id: &mut u64,
) -> common::KvEventBatch {
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
        dp_rank: Some(dp_rank),
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
        let (rank1, _) = broadcast::channel(2);
        let relay = Relay {
            version: SglangVersion::V0_5_23,
            page_size: 2,
        };
        assert_eq!(
            subscribe(&[], 0, relay).err().map(|s| s.code()),
            Some(tonic::Code::Unimplemented)
        );
        let taps = [tap.clone(), rank1.clone()];
        assert_eq!(
            subscribe(&taps, 5, relay).err().map(|s| s.code()),
            Some(tonic::Code::OutOfRange)
        );
        let mut s = subscribe(&taps, 0, relay).unwrap();
        // Rank 1's publisher: its own sequence, its rank on the batch.
        let _ = rank1.send(Arc::new(Published {
            seq: 0,
            ts: 1.0,
            events: vec![BlockEvent::Cleared],
        }));
        let b = s.next().await.unwrap().unwrap();
        assert_eq!((b.sequence_number, b.dp_rank), (0, Some(1)));
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
        assert_eq!(b.events[1].event_id, 3);
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
