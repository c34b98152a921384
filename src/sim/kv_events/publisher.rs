//! The publisher task (`ZmqEventPublisher`): batches from the engine driver go out on the PUB
//! socket as `[topic, seq (8 bytes, big-endian), payload]` with `seq` counting from 0, and into
//! a replay buffer of the last `buffer_steps` batches. A ROUTER socket answers a replay request
//! `[identity, "", start seq]` with every buffered batch from `start` and then an end marker of
//! seq −1 (0.5.9: `[seq, payload]` after the envelope; 0.5.23 puts the topic first). Each batch
//! also goes to the tap, unencoded, for `--grpc-mode`'s `SubscribeKvEvents` (the servicer relays
//! the same publisher's batches).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc};
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::blocks::BlockEvent;
use super::wire::encode_batch;
use super::{offset_port, KvEventsConfig, KvEventsError};
use crate::sim::version::SglangVersion;

/// `ZmqEventPublisher.END_SEQ`.
const END_SEQ: [u8; 8] = (-1i64).to_be_bytes();

/// Where the engine driver hands its batches: dropped when the queue is full (the publisher
/// fell `max_queue_size` batches behind), as events beyond the high-water mark are.
#[derive(Clone)]
pub struct EventSink(mpsc::Sender<Vec<BlockEvent>>);

impl EventSink {
    pub fn publish(&self, events: Vec<BlockEvent>) {
        if !events.is_empty() {
            let _ = self.0.try_send(events);
        }
    }
}

/// One batch as published: its sequence number, timestamp and the per-page events.
#[derive(Debug)]
pub struct Published {
    pub seq: u64,
    pub ts: f64,
    pub events: Vec<BlockEvent>,
}

/// Every published batch, for the gRPC relay; a subscriber that falls this many batches
/// behind has lost events (the relay then ends its stream with `DATA_LOSS`).
pub type Tap = broadcast::Sender<Arc<Published>>;
const TAP_BATCHES: usize = 4096;

/// A started publisher: where the engine hands batches, and the tap that sees them go out.
pub struct Started {
    pub sink: EventSink,
    pub tap: Tap,
}

/// What one rank's publisher needs besides the config.
#[derive(Debug, Clone, Copy)]
pub struct PublisherOptions {
    pub version: SglangVersion,
    pub page_size: usize,
    pub dp_rank: u32,
}

/// A bound-or-connected address for `zeromq`, which has no `*` wildcard.
fn socket_address(endpoint: &str) -> String {
    endpoint.replacen("tcp://*:", "tcp://0.0.0.0:", 1)
}

fn binds(cfg: &KvEventsConfig, endpoint: &str) -> bool {
    cfg.bind.unwrap_or_else(|| {
        ["*", "::", "0.0.0.0"]
            .iter()
            .any(|host| endpoint.contains(host))
    })
}

/// Binds (or connects) the sockets and starts the task; it ends when every sink is dropped.
pub async fn start(cfg: &KvEventsConfig, opts: PublisherOptions) -> Result<Started, KvEventsError> {
    let endpoint = offset_port(&cfg.endpoint, opts.dp_rank)?;
    let bind_err = |endpoint: &str| {
        let endpoint = endpoint.to_owned();
        move |source| KvEventsError::Bind { endpoint, source }
    };
    let mut publisher = PubSocket::new();
    if binds(cfg, &endpoint) {
        publisher
            .bind(&socket_address(&endpoint))
            .await
            .map_err(bind_err(&endpoint))?;
    } else {
        publisher
            .connect(&endpoint)
            .await
            .map_err(bind_err(&endpoint))?;
    }
    let replay = match &cfg.replay_endpoint {
        Some(r) => {
            let r = offset_port(r, opts.dp_rank)?;
            let mut router = RouterSocket::new();
            router
                .bind(&socket_address(&r))
                .await
                .map_err(bind_err(&r))?;
            Some(router)
        }
        None => None,
    };
    let (tx, rx) = mpsc::channel(cfg.max_queue_size.max(1));
    let (tap, _) = broadcast::channel(TAP_BATCHES);
    let task = Task {
        tap: tap.clone(),
        publisher,
        replay,
        buffer: VecDeque::new(),
        buffer_steps: cfg.buffer_steps,
        topic: Bytes::from(cfg.topic.clone().into_bytes()),
        next_seq: 0,
        opts,
    };
    tokio::spawn(task.run(rx));
    Ok(Started {
        sink: EventSink(tx),
        tap,
    })
}

struct Task {
    tap: Tap,
    publisher: PubSocket,
    replay: Option<RouterSocket>,
    buffer: VecDeque<(u64, Bytes)>,
    buffer_steps: usize,
    topic: Bytes,
    next_seq: u64,
    opts: PublisherOptions,
}

fn frames(parts: Vec<Bytes>) -> Option<ZmqMessage> {
    ZmqMessage::try_from(parts).ok()
}

impl Task {
    async fn run(mut self, mut rx: mpsc::Receiver<Vec<BlockEvent>>) {
        loop {
            let request = async {
                match self.replay.as_mut() {
                    Some(r) => r.recv().await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                batch = rx.recv() => match batch {
                    Some(events) => self.publish(events).await,
                    None => break,
                },
                Some(req) = request => self.serve_replay(req).await,
            }
        }
    }

    async fn publish(&mut self, events: Vec<BlockEvent>) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let payload = Bytes::from(encode_batch(
            self.opts.version,
            ts,
            &events,
            self.opts.page_size,
            self.opts.dp_rank,
        ));
        let seq = self.next_seq;
        self.next_seq += 1;
        let seq_bytes = Bytes::copy_from_slice(&seq.to_be_bytes());
        if let Some(msg) = frames(vec![self.topic.clone(), seq_bytes, payload.clone()]) {
            if let Err(e) = self.publisher.send(msg).await {
                tracing::warn!(error = %e, "kv events: publish failed");
            }
        }
        if self.buffer_steps > 0 {
            if self.buffer.len() == self.buffer_steps {
                self.buffer.pop_front();
            }
            self.buffer.push_back((seq, payload));
        }
        if self.tap.receiver_count() > 0 {
            let _ = self.tap.send(Arc::new(Published { seq, ts, events }));
        }
    }

    async fn serve_replay(&mut self, req: ZmqMessage) {
        let parts = req.into_vec();
        let [identity, _empty, start] = parts.as_slice() else {
            tracing::warn!(frames = parts.len(), "kv events: invalid replay request");
            return;
        };
        let start = start.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let with_topic = self.opts.version == SglangVersion::V0_5_23;
        let reply = |seq: Bytes, payload: Bytes, topic: &Bytes| {
            let mut parts = vec![identity.clone(), Bytes::new()];
            if with_topic {
                parts.push(topic.clone());
            }
            parts.extend([seq, payload]);
            frames(parts)
        };
        let Some(router) = self.replay.as_mut() else {
            return;
        };
        for (seq, payload) in self.buffer.iter().filter(|(s, _)| *s >= start) {
            let seq = Bytes::copy_from_slice(&seq.to_be_bytes());
            if let Some(msg) = reply(seq, payload.clone(), &self.topic) {
                if router.send(msg).await.is_err() {
                    return;
                }
            }
        }
        let end = reply(Bytes::from_static(&END_SEQ), Bytes::new(), &Bytes::new());
        if let Some(msg) = end {
            let _ = router.send(msg).await;
        }
    }
}
